"""The acquire scripts' replies (backends/redis/lua_parts.Acquired): named once, the same numbers in
the Lua as in Python, and a reply no script gives is an error (exit 69), never "busy"."""

from __future__ import annotations

import re

import pytest

from lockrun.backends.redis.backend import RedisBackend
from lockrun.backends.redis.lua_parts import ACQUIRE_CHECKS_LUA, ACQUIRE_PIECES, ACQUIRE_REPLIES_LUA, Acquired
from lockrun.backends.redis.scripts import ACQUIRE_SCRIPT
from lockrun.backends.redis.slot_scripts import SLOTS_ACQUIRE_SCRIPT
from lockrun.backends.values import FleetRetention
from lockrun.core.errors import BackendUnavailable


def test_the_lua_knows_every_reply_by_the_number_python_gives_it(redis_server):
    names = ", ".join(reply.name for reply in Acquired)
    got = redis_server.client().eval(ACQUIRE_REPLIES_LUA + f"return {{{names}}}", 0)
    assert got == [int(reply) for reply in Acquired]


@pytest.mark.parametrize("script", [ACQUIRE_SCRIPT, SLOTS_ACQUIRE_SCRIPT])
def test_the_acquire_scripts_return_names_not_numbers(script):
    assert script.startswith(ACQUIRE_PIECES) and ACQUIRE_PIECES.startswith(ACQUIRE_REPLIES_LUA)
    own = re.findall(r"return \{(-?\w+)", script[len(ACQUIRE_PIECES):])
    assert len(own) >= 6 and all(reply in Acquired.__members__ for reply in own), own
    # The refusals the shared checks return: by name too.
    refusals = ACQUIRE_CHECKS_LUA[ACQUIRE_CHECKS_LUA.index("local function refused("):]
    assert re.findall(r"return \{(-?\w+)", refusals)[:3] == ["EVICTING", "ZONE_NOT_A_STRING", "ZONE_MISMATCH"]


def backend_answering(reply) -> RedisBackend:
    """A Redis backend whose server gives ``reply`` to the acquire script (only the reading is real)."""

    class Connection:
        redacted = "redis://127.0.0.1:1/0"
        is_cluster = False

        def eval(self, call):
            return reply

    class NoReplicas:
        replicas = 0
        every = False

    backend = object.__new__(RedisBackend)
    backend.prefix, backend.allow_eviction = "lockrun:", False
    backend.connection, backend.replica_wait = Connection(), NoReplicas()
    backend.fleet = FleetRetention()
    return backend


@pytest.mark.parametrize("reply", [[7], [b"x"], [], [2], [5, b"1", b"2"]])
def test_a_reply_no_script_gives_is_an_error_not_a_busy_lock(reply):
    # [2] and [5, ...]: a --once duplicate and a --once-every skip, to an acquire that asked for neither.
    with pytest.raises(BackendUnavailable) as raised:
        backend_answering(reply).acquire("job", "tok", 60.0, {"host": "h"})
    assert raised.value.exit_code == 69
    assert "answered the acquire of 'job'" in str(raised.value) and "\n" not in str(raised.value)
