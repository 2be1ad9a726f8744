"""The local backend: the lease as a kernel lock (``fcntl``) on a file in the state directory,
for one host with no Redis. ``files`` names and opens the files, ``holders`` describes who
holds what, ``records`` keeps ``--once`` marks and zones, ``waiting`` sleeps in the kernel until
a holder lets go; knows nothing of the Redis backend.
"""
