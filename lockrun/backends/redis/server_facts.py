"""What one Redis server says of itself, read-only (``lockrun doctor``): round trips, INFO,
CONFIG GET, ROLE, HELLO, a one-line script, TIME, the commands it knows, and its ACL's word on
lockrun's user. ``views/doctor.py`` judges it.

Nothing here writes: CONFIG is only ever asked (GET), scripts read nothing but their arguments.
Every value the server refuses (a renamed CONFIG, an ACL without INFO) is an ``Unread`` with its
words; a connection that fails raises (client.REDIS_ERRORS), and the caller says the server
could not be checked.
"""

from __future__ import annotations

import time

import redis
from redis.exceptions import ResponseError

from lockrun.backends.audit import ClockReading, InfoSection, Need, ServerFacts, Unread
from lockrun.backends.redis.acl_check import acl_facts
from lockrun.backends.redis.raw import RawCalls
from lockrun.backends.redis.replies import int_or_none, text

#: The INFO sections the checks read (asked one by one: an ACL may allow some and not others).
INFO_SECTIONS = ("server", "memory", "persistence", "replication")
#: What CONFIG GET is asked for, where INFO does not say it.
CONFIG_PARAMETERS = ("maxmemory", "maxmemory-policy", "appendonly", "appendfsync", "save", "min-replicas-to-write",
                     "min-replicas-max-lag", "replica-read-only")
#: Round trips measured after the first (which connects and authenticates).
PINGS = 5


def parse_info(reply: object) -> dict[str, str]:
    """``field:value`` lines of an INFO reply (section headers and blank lines left out)."""
    fields: dict[str, str] = {}
    for line in text(reply).splitlines():
        if line and not line.startswith("#") and ":" in line:
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    return fields


def _unread(reply: ResponseError) -> Unread:
    return Unread(" ".join(str(reply).split()))


def _info(reply: object) -> InfoSection:
    if isinstance(reply, ResponseError):
        return _unread(reply)
    fields = parse_info(reply)
    return fields if fields else Unread("an empty reply")


def _config(parameter: str, reply: object) -> str | Unread:
    if isinstance(reply, ResponseError):
        return _unread(reply)
    if isinstance(reply, list) and len(reply) >= 2:  # [name, value] (a pattern could match more; ours do not)
        return text(reply[1])
    return Unread(f"the server does not know {parameter}")


def _role(reply: object) -> tuple[str, ...] | Unread:
    if isinstance(reply, ResponseError):
        return _unread(reply)
    if not isinstance(reply, list) or not reply:
        return Unread("an unreadable reply")
    kind = text(reply[0])
    if kind == "master":
        replicas = reply[2] if len(reply) > 2 and isinstance(reply[2], list) else []
        return ("master", *(f"{text(r[0])}:{text(r[1])}" for r in replicas if isinstance(r, list) and len(r) >= 2))
    if kind in ("slave", "replica") and len(reply) >= 4:
        return ("slave", f"{text(reply[1])}:{text(reply[2])}", text(reply[3]))
    return (kind,)


def _hello(reply: object) -> dict[str, str] | Unread:
    if isinstance(reply, ResponseError):
        return _unread(reply)
    if not isinstance(reply, list):
        return Unread("an unreadable reply")
    return {text(key): text(value) for key, value in zip(reply[0::2], reply[1::2], strict=False)
            if not isinstance(value, list)}


def _unknown(commands: list[str], reply: object) -> tuple[str, ...] | Unread:
    if isinstance(reply, ResponseError):
        return _unread(reply)
    if not isinstance(reply, list) or len(reply) != len(commands):
        return Unread("an unreadable reply")
    return tuple(command for command, entry in zip(commands, reply, strict=True) if entry is None)


def _clock(raw: RawCalls) -> ClockReading | Unread:
    sent = time.time()
    (reply,) = raw.batch([("TIME",)])
    received = time.time()
    if isinstance(reply, ResponseError):
        return _unread(reply)
    if isinstance(reply, list) and len(reply) == 2:
        seconds, micros = int_or_none(reply[0]), int_or_none(reply[1])
        if seconds is not None and micros is not None:
            return ClockReading(seconds + micros / 1e6, sent, received)
    return Unread("an unreadable reply")


def server_facts(client: redis.Redis, where: str, needed: list[Need], keys: tuple[str, str | None],
                 url_user: str | None) -> ServerFacts:
    """Everything the checks read of one server: a few round trips, nothing written."""
    raw = RawCalls(client)
    started = time.monotonic()
    raw.batch([("PING",)])  # connects and authenticates: a refusal raises here
    connect_s = time.monotonic() - started
    rtts = []
    for _ in range(PINGS):
        started = time.monotonic()
        raw.batch([("PING",)])
        rtts.append(time.monotonic() - started)
    commands = [need.command for need in needed]
    asked = ([("INFO", section) for section in INFO_SECTIONS]
             + [("CONFIG", "GET", parameter) for parameter in CONFIG_PARAMETERS]
             + [("ROLE",), ("HELLO", "2"), ("EVAL", "return 'ok'", 0), ("COMMAND", "INFO", *commands)])
    replies = raw.batch(asked)
    infos = dict(zip(INFO_SECTIONS, (_info(reply) for reply in replies), strict=False))
    replies = replies[len(INFO_SECTIONS):]
    config = {parameter: _config(parameter, reply) for parameter, reply in zip(CONFIG_PARAMETERS, replies,
                                                                             strict=False)}
    role, hello, script, known = replies[len(CONFIG_PARAMETERS):]
    return ServerFacts(
        where=where, connect_s=connect_s, rtts_s=tuple(rtts), info=infos, config=config, role=_role(role),
        hello=_hello(hello), script=_unread(script) if isinstance(script, ResponseError) else text(script),
        clock=_clock(raw), unknown_commands=_unknown(commands, known),
        acl=acl_facts(raw, needed, keys[0], keys[1], url_user),
    )
