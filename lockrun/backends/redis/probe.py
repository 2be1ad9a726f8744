"""``lockrun doctor --probe``: the lease operations of a run, tried live on a scratch name, then
every key they wrote removed (docs/operating.md "Checking the setup: lockrun doctor").

Two holders, each on a connection of its own as two hosts would be, go through the very scripts
a run sends: the first takes the lock, the second finds it busy, the first renews it, the second
waits (woken by the release, as ``--wait`` is) and takes it over with a higher fencing token, and
gives it back. Everything runs under a prefix of its own, ``<prefix>doctor:<host>:<pid>:<random>:``,
so every key the scripts write beside the lock (fence, info, the fleet record, the registry of
names, the wake list) is the probe's and nothing else's; at the end one SCAN per master finds
them all, and they are deleted. No key outside that prefix is read or written.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Callable

from redis.exceptions import ResponseError

from lockrun.backends.audit import ProbeFacts
from lockrun.backends.protocol import Backend
from lockrun.backends.redis.client import REDIS_ERRORS, RedisConnection
from lockrun.backends.redis.keys import SCAN_BATCH
from lockrun.backends.redis.raw import RawCalls
from lockrun.backends.redis.replies import int_or_none, text
from lockrun.backends.redis.topology import masters
from lockrun.backends.values import Lease
from lockrun.core.clock import utc_now_iso
from lockrun.core.errors import LockrunError
from lockrun.system import host

#: A backend like the one audited, with its own connection, whose keys all start with the prefix given.
Scratch = Callable[[str], Backend]

#: The scratch lock's name under the probe's own prefix.
NAME = "probe"
#: How long the second holder may wait to be woken after the release before the probe says the
#: wake-up failed (it then takes the lock once the lease runs out, as a run would).
SETTLE_S = 0.05


def scratch_prefix(prefix: str) -> str:
    """``<prefix>doctor:<host>:<pid>:<random>:``: a host name's odd characters (none in a DNS name)
    become ``_``; the random part keeps two probes apart whose hosts share a name and a pid (cloned
    VMs, containers), since each removes everything under its own prefix."""
    return f"{prefix}doctor:{re.sub(r'[^A-Za-z0-9.-]', '_', host.hostname())}:{os.getpid()}:{os.urandom(4).hex()}:"


def _glob(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def _holder_info(token: str, ttl: float, which: str) -> dict[str, str]:
    now = utc_now_iso()
    return {"token": token, "run_id": os.urandom(16).hex(), "host": host.hostname(), "boot_id": host.boot_id(),
            "pid": str(os.getpid()), "pid_start": str(host.own_start() or ""), "child_pid": "",
            "command": json.dumps(["lockrun", "doctor", "--probe", which]), "started_at": now, "heartbeat_at": now,
            "ttl_ms": str(int(ttl * 1000)), "pid_ns": str(host.pid_ns() or ""), "machine_id": host.machine_id()}


class _Waiter(threading.Thread):
    """The second holder: busy while the first holds, then woken by its release."""

    def __init__(self, backend: Backend, ttl: float) -> None:
        super().__init__(daemon=True, name="lockrun-doctor-probe")
        self.backend, self.ttl = backend, ttl
        self.token = os.urandom(16).hex()
        self.waiting = threading.Event()
        self.lease: Lease | None = None
        self.granted_at: float | None = None
        self.error: BaseException | None = None

    def granted(self) -> tuple[Lease, float] | None:
        """The lease it took and when (time.monotonic()), once it took one (the thread sets both)."""
        if self.lease is None or self.granted_at is None:
            return None
        return self.lease, self.granted_at

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 2 * self.ttl + 1
            while time.monotonic() < deadline:
                got = self.backend.acquire(NAME, self.token, self.ttl, _holder_info(self.token, self.ttl, "second"))
                if isinstance(got, Lease):
                    self.granted_at = time.monotonic()
                    self.lease = got
                    return
                self.waiting.set()
                self.backend.wait_for_release(NAME, self.ttl + 0.1)
        except BaseException as exc:  # noqa: BLE001 - handed to the probe, which says it in one line
            self.error = exc
            self.waiting.set()


def _count_keys(connection: RedisConnection) -> int | None:
    """DBSIZE summed over every master (None: a master would not say)."""
    total = 0
    for _, client in masters(connection):
        (reply,) = RawCalls(client).batch([("DBSIZE",)])
        size = None if isinstance(reply, ResponseError) else int_or_none(reply)
        if size is None:
            return None
        total += size
    return total


def _scratch_keys(connection: RedisConnection, scratch: str) -> list[tuple[RawCalls, str]]:
    """Every key under the scratch prefix, on every master (SCAN with MATCH: never KEYS)."""
    found: list[tuple[RawCalls, str]] = []
    for _, client in masters(connection):
        raw = RawCalls(client)
        cursor = "0"
        while True:
            reply = raw.one("SCAN", cursor, "MATCH", _glob(scratch) + "*", "COUNT", SCAN_BATCH)
            if not isinstance(reply, list) or len(reply) != 2:
                break
            cursor = text(reply[0])
            found += [(raw, text(key)) for key in reply[1]]
            if cursor == "0":
                break
    return found


def _clean(connection: RedisConnection, scratch: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Delete every scratch key: (what was there, what is left)."""
    written = _scratch_keys(connection, scratch)
    for raw, key in written:
        raw.batch([("DEL", key)])  # one key per DEL: on a Cluster, keys of several slots cannot share one
    left = _scratch_keys(connection, scratch)
    return tuple(sorted(key for _, key in written)), tuple(sorted(key for _, key in left))


class _Steps:
    """The probe's steps, each noting what it saw in ``facts`` (and ``step``: the one under way)."""

    def __init__(self, connection: RedisConnection, make: Scratch, facts: ProbeFacts) -> None:
        self.connection, self.facts, self.step = connection, facts, ""
        self.first, self.second = make(facts.scratch), make(facts.scratch)
        self.waiter = _Waiter(self.second, facts.ttl_s)
        self.held: Lease | None = None  # the first holder's lease until it is released

    def _join(self) -> None:
        self.waiter.join(2 * self.facts.ttl_s + 2 * self.connection.timeout + 1)
        if self.waiter.error is not None:
            raise self.waiter.error

    def run(self) -> None:
        ttl, waiter = self.facts.ttl_s, self.waiter
        self.step = "the first holder's acquire"
        token = os.urandom(16).hex()
        got = self.first.acquire(NAME, token, ttl, _holder_info(token, ttl, "first"))
        if not isinstance(got, Lease):
            raise LockrunError(f"the scratch name {self.facts.scratch}{{{NAME}}} was not free ({type(got).__name__})")
        lease = self.held = got
        self.facts = self.facts._replace(first_fence=lease.fencing_token)
        self.step = "the second holder's acquire"
        waiter.start()
        waiter.waiting.wait(ttl + 2 * self.connection.timeout)
        if waiter.error is not None:
            raise waiter.error
        early = waiter.granted()
        if early is not None:  # the second holder took a lock the first holds
            self.facts = self.facts._replace(contender="acquired", second_fence=early[0].fencing_token)
            return
        self.facts = self.facts._replace(contender="busy")
        self.step = "the renewal"
        self.facts = self.facts._replace(renewal=self.first.renew(lease, utc_now_iso(), None))
        self.step = "the hand-over"
        time.sleep(SETTLE_S)  # the second holder's BLPOP is on its way: the release is what must wake it
        released_at = time.monotonic()
        self.held = None
        self.first.release(lease)
        self._join()
        granted = waiter.granted()
        if granted is None:
            raise LockrunError("the second holder never got the lock after the release")
        second_lease, granted_at = granted
        self.facts = self.facts._replace(second_fence=second_lease.fencing_token,
                                         handover_s=max(0.0, granted_at - released_at))
        self.step = "the second holder's release"
        waiter.lease = None
        self.second.release(second_lease)

    def failed(self, exc: BaseException) -> None:
        if isinstance(exc, REDIS_ERRORS):
            exc = self.connection.unavailable(exc)
        words = str(exc) or type(exc).__name__
        self.facts = self.facts._replace(failure=f"{self.step}: {' '.join(words.split())}")

    def close(self) -> None:
        """Let go of whatever a step that failed left held, so that the waiter ends before the keys
        are removed (a waiter still running could write them again)."""
        with contextlib.suppress(Exception):
            if self.held is not None:
                self.first.release(self.held)
        if self.waiter.is_alive():
            self.waiter.join(2 * self.facts.ttl_s + 2 * self.connection.timeout + 1)
        with contextlib.suppress(Exception):
            if self.waiter.lease is not None:
                self.second.release(self.waiter.lease)
        self.first.close()
        self.second.close()


def run_probe(connection: RedisConnection, make: Scratch, ttl: float) -> ProbeFacts:
    """The probe's steps on two backends ``make`` builds, and what each step saw; it stops at the
    first step that fails, and removes whatever the steps wrote, however far they came."""
    scratch = scratch_prefix(connection.prefix)
    facts = ProbeFacts(scratch=scratch, ttl_s=ttl)
    try:
        facts = facts._replace(keys_before=_count_keys(connection))
    except REDIS_ERRORS as exc:
        return facts._replace(failure=f"counting keys (DBSIZE): {connection.unavailable(exc)}")
    steps = _Steps(connection, make, facts)
    try:
        steps.run()
    except Exception as exc:  # noqa: BLE001 - any step's failure is the probe's finding, in one line
        steps.failed(exc)
    finally:  # an interrupted probe too removes what it wrote
        steps.close()
        try:
            written, left = _clean(connection, scratch)
            steps.facts = steps.facts._replace(written=written, left=left, keys_after=_count_keys(connection))
        except REDIS_ERRORS as exc:
            unlooked = f"{scratch}* (it could not look for them: {connection.unavailable(exc)})"
            steps.facts = steps.facts._replace(left=(unlooked,))
    return steps.facts
