"""The command line: the only place click is imported.

``main`` is the entry point and maps every ``LockrunError`` to one line and its exit code;
``group`` holds the group, its bare form and the global options; ``params`` the parameter
types; ``run``, ``locks``, ``records`` and ``timeline`` the commands, each of which parses,
makes one call below and prints the answer.
"""
