"""Facts about this host and its processes, and files opened safely.

``host``: boot id, machine id, PID namespace, whether a pid is provably gone; ``safefs``: private
directories and files never opened through a link, ancestors checked as ssh's StrictModes does;
``own_output``: lockrun's own standard streams. May import ``core`` only.
"""
