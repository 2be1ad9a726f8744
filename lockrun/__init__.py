"""lockrun: run a command under a named, renewed lease so it never runs twice at once."""

__version__ = "0.1.0"
#: The date of this version (the man page's .TH date); changed with __version__.
__date__ = "2026-12-06"
