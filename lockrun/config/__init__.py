"""Settings: flag > environment > config file > default, every value in its range.

``values``: the parsers of single values (durations, names, sizes, URLs) with their ranges,
one syntax for every time value; ``moments``: the points in time of ``--since``/``--until``;
``once``: the ``--once`` key rules; ``file``: the config file and the Redis password file, read
only when trusted; ``settings``: ``Settings`` and ``resolve``; ``state_home``: where local state
lives. May import ``backends`` (its values and the Redis URL parser), ``ledger``, ``system``
and ``core``.
"""
