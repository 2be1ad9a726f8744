"""The Redis backend: the lease as Lua scripts (``scripts``, a --slots lease's ``slot_scripts``,
built from ``lua_parts``, called as ``script_call`` says), the key names (``keys``), the client and
its timeouts (``client``), replies read defensively (``replies``), holders as Redis describes them
(``inspect``), the fleet record's read side (``fleet``), ``--replicas`` (``replicas``), the eviction
check (``eviction``) and URLs (``url``). The only place redis-py is imported; knows nothing of the
local backend.
"""
