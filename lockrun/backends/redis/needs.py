"""Every command lockrun sends to Redis, what needs it, and how to ask an ACL about it
(``lockrun doctor``, docs/redis.md "What lockrun needs of Redis").

The commands the scripts run are read out of the scripts themselves, so a script that starts
calling another command is checked without anyone remembering to list it here; the commands the
client sends (EVAL, BLPOP, WAIT, and those of the read commands) are listed by hand, and
tests/unit/test_redis_needs.py checks the list against the calls in this folder.
"""

from __future__ import annotations

import re

from lockrun.backends.audit import Need
from lockrun.backends.redis import scripts, slot_scripts
from lockrun.backends.redis.fleet import FIND_RUN_SCRIPT
from lockrun.backends.redis.inspect import TIME_SCRIPT
from lockrun.backends.redis.keys import lock_keys, registry_key
from lockrun.backends.redis.pauses import READ_PRESENT_SCRIPT

#: ``redis.call('HSET'`` and ``redis.pcall("INFO"``: the command a script line runs.
_SCRIPT_CALL = re.compile(r"""redis\.p?call\(\s*['"]([A-Za-z]+)['"]""")

#: The scripts a run sends (acquire, renew, release, --retry's, --replace's), by what needs them.
RUN_SCRIPTS = (scripts.ACQUIRE_SCRIPT, slot_scripts.SLOTS_ACQUIRE_SCRIPT, scripts.RENEW_SCRIPT,
               slot_scripts.SLOTS_RENEW_SCRIPT, scripts.RELEASE_SCRIPT, slot_scripts.SLOTS_RELEASE_SCRIPT,
               scripts.ATTEMPT_OVER_SCRIPT, scripts.ATTEMPT_BEGINS_SCRIPT, scripts.PREEMPT_SCRIPT)
#: The scripts the other commands send: status, unlock, pause, history --fleet, show --fleet.
READ_SCRIPTS = (scripts.READ_LOCKS_SCRIPT, scripts.PAUSE_SCRIPT, scripts.CLEAR_FOREIGN_SCRIPT, TIME_SCRIPT,
                READ_PRESENT_SCRIPT, FIND_RUN_SCRIPT)

#: What each command is asked about with (``K``: the key): ACL DRYRUN checks a command's arity, and
#: a key is found where the command's key specification looks for one. Keyless commands have no K.
ASKED_WITH: dict[str, tuple[str, ...]] = {
    "DEL": ("K",), "EXISTS": ("K",), "GET": ("K",), "HDEL": ("K", "f"), "HGET": ("K", "f"), "HGETALL": ("K",),
    "HINCRBY": ("K", "f", "1"), "HLEN": ("K",), "HMGET": ("K", "f"), "HSET": ("K", "f", "v"), "INCRBY": ("K", "1"),
    "INFO": ("memory",), "LPUSH": ("K", "v"), "LRANGE": ("K", "0", "1"), "LTRIM": ("K", "0", "1"),
    "PEXPIRE": ("K", "1"), "PEXPIREAT": ("K", "1"), "PTTL": ("K",), "SET": ("K", "v"), "TIME": (), "TYPE": ("K",),
    "XADD": ("K", "*", "f", "v"), "XRANGE": ("K", "-", "+"), "XREVRANGE": ("K", "+", "-"),
    "XTRIM": ("K", "MAXLEN", "1"), "ZADD": ("K", "1", "m"), "ZCARD": ("K",), "ZRANGE": ("K", "0", "1"),
    "ZRANGEBYSCORE": ("K", "0", "1"), "ZREM": ("K", "m"), "ZREMRANGEBYSCORE": ("K", "0", "1"), "ZSCORE": ("K", "m"),
    "BLPOP": ("K", "1"), "WAIT": ("0", "0"), "ROLE": (), "SCAN": ("0",), "PING": (),
}


def script_commands(*sources: str) -> set[str]:
    """The commands ``redis.call``/``redis.pcall`` run in these scripts, upper case."""
    return {match.upper() for source in sources for match in _SCRIPT_CALL.findall(source)}


def needs(replicas: bool) -> list[Need]:
    """Every command lockrun sends, each once, the ones a run sends first. ``replicas``: the
    configuration asks for ``--replicas`` (then WAIT, and ROLE for ``all``, are needed by runs)."""
    found: dict[str, Need] = {}

    def add(command: str, uses: str, runs: bool) -> None:
        if command not in found:
            found[command] = Need(command, uses, runs, command == "EVAL" or "K" in ASKED_WITH.get(command, ("K",)))

    add("EVAL", "every run", True)  # each lease operation is one script
    for command in sorted(script_commands(*RUN_SCRIPTS)):
        add(command, "every run", True)
    add("BLPOP", "--wait", True)  # a waiter is woken by the release
    add("WAIT", "--replicas", replicas)
    add("ROLE", "--replicas all", replicas)
    read = "status, unlock, pause, history --fleet"
    for command in sorted(script_commands(*READ_SCRIPTS)):
        add(command, read, False)
    for command in ("GET", "PTTL", "TYPE", "EXISTS", "HGETALL", "HMGET", "LRANGE", "XRANGE", "XREVRANGE",
                    "ZRANGE", "ZRANGEBYSCORE", "DEL", "TIME", "SCAN", "INFO", "PING"):
        add(command, read, False)
    return list(found.values())


def trial_keys(prefix: str, cluster: bool) -> tuple[str, str | None]:
    """The keys an ACL is asked about: one of a name's keys (``prefix{NAME}:…``, hash-tagged) and,
    but on a Cluster, the registry of names (``prefixnames``, no hash tag: docs/redis.md "Redis keys")."""
    return lock_keys(prefix, "doctor").info, None if cluster else registry_key(prefix)


def arguments(command: str, key: str | None) -> tuple[str, ...]:
    """``command`` with arguments of the right number that name ``key`` where it takes one. A
    command missing from ASKED_WITH is asked about with the key alone (tests/unit/test_redis_needs.py
    keeps the table complete)."""
    if command == "EVAL":  # a script that does nothing, with the key declared (or none)
        return ("EVAL", "return 1", "1", key) if key is not None else ("EVAL", "return 1", "0")
    shape = ASKED_WITH.get(command, ("K",))
    return (command, *(key or "" if part == "K" else part for part in shape))
