"""lockrun: run a command under a named, renewed lease so it never runs twice at once."""

__version__ = "0.1.0"
