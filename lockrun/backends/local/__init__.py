"""The local backend: the lease as a kernel lock (``fcntl``) on a file in the state directory,
for one host with no Redis. ``files`` names and opens the files, ``holders`` describes who
holds what, ``records`` keeps ``--once`` marks and zones; knows nothing of the Redis backend.
"""
