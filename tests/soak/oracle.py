"""What the Redis server itself did with each lease, reconstructed from MONITOR.

The soak must not take lockrun's word for when a lease began, was extended or
ended. Redis' MONITOR stream shows every command a client sent, followed by the
commands each Lua script ran (``[0 lua]``), with the server's own timestamps.
From it we rebuild, for every lock name and every server lifetime ("epoch"):
who was granted the lease (owner token, run id, fencing token), each moment the
server reset its expiry, and how it ended (released, stolen by the fault
injector, the server died, or simply expired).

Redis applies a ``PX``/``PEXPIRE`` of ``ms`` at time ``t`` as "expired once the
clock passes ``t + ms``", so a lease's deadline is its last reset plus its TTL.

With replication and failovers (``reconstruct_across``), the streams of every server are
merged on the one clock they share (one host): a lease is then followed by its owner token
from the master that granted it to the one that renews it after a failover.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from dataclasses import dataclass, field

from lockrun.backends.redis.record_format import decode_event, is_compact

_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')
_LINE = re.compile(r"^\+?(\d+\.\d+) \[(\d+) ([^\]]*)\] (.*)$")

#: Two leases of one name may touch but not overlap by more than the clock's grain.
EPSILON = 0.002


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b"}


def _unescape(text: str) -> str:
    """Undo MONITOR's quoting (sdscatrepr): \\" \\\\ \\n ... and \\xHH."""
    if "\\" not in text:
        return text

    def one(match: re.Match) -> str:
        escaped = match.group(1)
        if escaped.startswith("x") and len(escaped) == 3:
            return chr(int(escaped[1:], 16))
        return _ESCAPES.get(escaped, escaped)

    return re.sub(r"\\(x[0-9a-fA-F]{2}|.)", one, text)


def parse_line(line: str) -> tuple[float, str, list[str]] | None:
    """``(server time, client, args)`` of one MONITOR line; client is ``lua`` for script calls."""
    match = _LINE.match(line)
    if not match:
        return None
    return float(match.group(1)), match.group(3), [_unescape(a) for a in _ARG.findall(match.group(4))]


class MonitorRecorder:
    """Reads one server lifetime's MONITOR stream (over the unix socket) into memory.

    ``on_end`` is called (from the reader thread) when the stream ends: the server died, or
    cut the connection (Sentinel's ``CLIENT KILL TYPE normal`` on a failover cuts MONITOR too).
    """

    def __init__(self, socket_path: str, epoch: int, password: str | None = None, on_end=None) -> None:
        self.epoch = epoch
        self.lines: list[str] = []
        self.ended_at: float | None = None
        self._on_end = on_end
        self._sock = socket.socket(socket.AF_UNIX)
        self._sock.settimeout(10)
        self._sock.connect(socket_path)
        if password:
            self._sock.sendall(f"AUTH {password}\r\n".encode())
        self._sock.sendall(b"MONITOR\r\n")
        self._buffer = b""
        first = self._readline()
        if password:
            first = self._readline()
        if first != "+OK":
            raise RuntimeError(f"MONITOR refused: {first!r}")
        self._sock.settimeout(None)
        self._thread = threading.Thread(target=self._read, name=f"soak-monitor-{epoch}", daemon=True)
        self._thread.start()

    def _readline(self) -> str | None:
        while b"\r\n" not in self._buffer:
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\r\n", 1)
        return line.decode("utf-8", "replace")

    def _read(self) -> None:
        try:
            while (line := self._readline()) is not None:
                self.lines.append(line)
        except OSError:
            pass
        self.ended_at = time.time()
        if self._on_end is not None:
            self._on_end(self)

    def stop(self, timeout: float = 10) -> None:
        """Wait for the stream to end (the server died) or cut it (the soak is over)."""
        self._thread.join(timeout)
        with contextlib.suppress(OSError):
            self._sock.close()


@dataclass
class ServerLease:
    name: str
    epoch: int
    token: str
    acquired_at: float
    ttl: float  # seconds, as last set
    last_reset: float
    run_id: str | None = None
    fencing_token: int | None = None
    #: the run ids of the later --retry attempts under this lease (the HSET info of each attempt's start)
    attempt_run_ids: list[str] = field(default_factory=list)
    resets: int = 0
    ended_at: float | None = None
    end: str | None = None  # released | stolen | died | expired | replaced
    #: (when, which server, ttl, the replicas its client's WAIT asked for) of the grant and of every
    #: reset that counted (reconstruct_across)
    history: list[tuple[float, str, float, int]] = field(default_factory=list)

    @property
    def deadline(self) -> float:
        """When the server would have expired it, had nothing else ended it."""
        return self.last_reset + self.ttl

    @property
    def valid_until(self) -> float:
        return min(self.deadline, self.ended_at) if self.ended_at is not None else self.deadline


@dataclass
class FleetEvent:
    """An event a script appended to a name's ``runs`` stream (the fleet record)."""

    epoch: int
    name: str
    kind: str  # end: one entry per finished run
    fields: dict[str, str]


@dataclass
class Reconstruction:
    leases: list[ServerLease] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    fleet_events: list[FleetEvent] = field(default_factory=list)
    releases: dict[str, list[int]] = field(default_factory=dict)  # run id -> epochs its release script ran in

    def by_run_id(self) -> dict[str, ServerLease]:
        """Each run id's lease: under --retry, every attempt's run id names its run's one lease."""
        found = {lease.run_id: lease for lease in self.leases if lease.run_id}
        for lease in self.leases:
            found.update(dict.fromkeys(lease.attempt_run_ids, lease))
        return found


def lock_name(key: str, prefix: str, kind: str = "lock") -> str | None:
    """``NAME`` of ``{prefix}{NAME}:{kind}`` (a lock's key of that kind), else None."""
    suffix = "}:" + kind
    if key.startswith(prefix + "{") and key.endswith(suffix):
        return key[len(prefix) + 1:-len(suffix)]
    return None


def _after(args: list[str], word: str) -> str | None:
    """The argument that follows the first ``word`` in ``args`` (a field's value in ARGV pairs)."""
    try:
        return args[args.index(word) + 1]
    except (ValueError, IndexError):
        return None


def reconstruct(epochs: list[tuple[int, list[str], float | None]], prefix: str = "lockrun:") -> Reconstruction:
    """Leases from MONITOR lines: ``epochs`` is ``[(epoch, lines, server death time or None)]``.

    Also checks the server-side invariant the Lua scripts exist for: a lease is
    granted only when the previous one of that name has ended (released, stolen,
    died) or passed its deadline, and only the owner's token extends or releases it.
    """
    out = Reconstruction()
    for epoch, lines, died_at in epochs:
        current: dict[str, ServerLease] = {}
        context: list[str] = []  # the client command the following lua lines belong to
        pending: ServerLease | None = None  # a SET NX seen; granted once the fence is written

        def end(lease: ServerLease, how: str, at: float) -> None:
            if lease.ended_at is None:
                if at >= lease.deadline:
                    lease.end, lease.ended_at = "expired", lease.deadline
                else:
                    lease.end, lease.ended_at = how, at

        def script_token(args: list[str]) -> str | None:
            # EVALSHA sha numkeys key... token ...: ARGV[1] is the owner token in every script
            try:
                return args[3 + int(args[2])]
            except (IndexError, ValueError):
                return None

        for raw in lines:
            parsed = parse_line(raw)
            if parsed is None:
                continue
            at, client, args = parsed
            if not args:
                continue
            verb = args[0].upper()
            if client != "lua":
                context = args
                pending = None
                if verb in ("EVAL", "EVALSHA") and len(args) > 1 and "return released" in args[1]:
                    # A release script reached the server: its ARGV carries the run's fleet entry,
                    # which opens with its run id as field "r".
                    run_id = _after(args, "r")
                    if run_id:
                        out.releases.setdefault(run_id, []).append(epoch)
                # Anything else a client does to a lock key (the injector's steals) ends the lease.
                if verb not in ("EVALSHA", "EVAL") and len(args) > 1:
                    name = lock_name(args[1], prefix)
                    if name and name in current and verb in ("DEL", "SET", "UNLINK", "GETDEL", "PEXPIRE", "EXPIRE"):
                        end(current.pop(name), "stolen", at)
                continue
            key = args[1] if len(args) > 1 else ""
            name = lock_name(key, prefix)
            if verb == "XADD" and lock_name(key, prefix, "runs") and "*" in args:
                fields = args[args.index("*") + 1:]
                # field/value pairs as MONITOR printed them; a dangling field is no pair
                pairs = dict(zip(fields[0::2], fields[1::2], strict=False))
                if is_compact(pairs):  # one entry per finished run: read as the end event it stands for
                    pairs = {str(k): str(v) for k, v in decode_event("0-0", pairs, {}).items()}
                    out.fleet_events.append(FleetEvent(epoch, lock_name(key, prefix, "runs"), pairs["event"], pairs))
                continue
            if verb == "SET" and name and "NX" in (a.upper() for a in args[3:]):
                ttl_ms = int(args[args.index("PX") + 1]) if "PX" in args else 0
                pending = ServerLease(name, epoch, args[2], at, ttl_ms / 1000.0, at)
            elif verb == "SET" and name:
                # A script writing the lock key without NX would override whoever holds it.
                lease = current.get(name)
                if lease is None or args[2] != lease.token:
                    out.violations.append(f"epoch {epoch}: a script overwrote {name!r} at {at:.3f} with token "
                                          f"{args[2][:8]} (SET without NX)")
                elif "PX" in args:
                    lease.last_reset, lease.ttl = at, int(args[args.index("PX") + 1]) / 1000.0
                    lease.resets += 1
            elif verb == "SET" and pending is not None and lock_name(key, prefix, "fence"):
                holder = current.get(pending.name)
                if holder is not None:
                    if at < holder.valid_until - EPSILON:
                        out.violations.append(
                            f"epoch {epoch}: {pending.name!r} granted to token {pending.token[:8]} at {at:.3f} while"
                            f" run {holder.run_id} held it until {holder.valid_until:.3f}"
                        )
                    end(holder, "replaced", at)
                current[pending.name] = pending
                out.leases.append(pending)
                pending = None
            elif verb == "HSET" and lock_name(key, prefix, "info") and ("fencing_token" in args or "run_id" in args):
                note_holder(current.get(lock_name(key, prefix, "info")), args)
            elif verb == "PEXPIRE" and name:
                token = script_token(context)
                lease = current.get(name)
                if lease is None or token != lease.token:
                    out.violations.append(
                        f"epoch {epoch}: {name!r} lease extended at {at:.3f} for token {str(token)[:8]}, "
                        f"which does not hold it"
                    )
                    continue
                # The server expires keys by whole milliseconds, and MONITOR stamps a script's commands
                # as they run, not when the script (whose clock is frozen) began: within EPSILON of the
                # deadline the server may still hold the key, as the renewal's own GET found (and as
                # the check of a server that stayed up below allows).
                if at > lease.deadline + EPSILON:
                    out.violations.append(f"epoch {epoch}: {name!r} extended at {at:.3f} after it expired"
                                          f" at {lease.deadline:.3f}")
                lease.last_reset, lease.ttl = at, int(args[2]) / 1000.0
                lease.resets += 1
            elif verb == "DEL" and name:
                token = script_token(context)
                lease = current.get(name)
                if lease is not None and token == lease.token:
                    end(current.pop(name), "released", at)
                elif lease is not None:
                    if at < lease.deadline - EPSILON:
                        out.violations.append(
                            f"epoch {epoch}: {name!r} deleted at {at:.3f} by a script call for token "
                            f"{str(token)[:8]}, while token {lease.token[:8]} held it"
                        )
                    end(current.pop(name), "cleared", at)
        for lease in current.values():
            end(lease, "died", died_at if died_at is not None else float("inf"))
    return out


#: A replica's copy of a reset carries the master's absolute expiry (PXAT, PEXPIREAT): the
#: master's clock when the script ran plus the TTL, a few ms from the MONITOR timestamp at most.
COPY_SLACK_MS = 10


def note_holder(lease: ServerLease | None, args: list[str]) -> None:
    """The fencing token and run id a grant's ``HSET info`` wrote, the first time (renewals
    rewrite only the heartbeat), for both replays; later, a --retry attempt's new run id (the
    script that begins an attempt writes it, under the same lease)."""
    fields = dict(zip(args[2::2], args[3::2], strict=False))  # field, value, ...
    if lease is not None and lease.fencing_token is None and "fencing_token" in fields:
        lease.fencing_token = int(fields["fencing_token"])
        lease.run_id = fields.get("run_id")
    elif lease is not None and fields.get("run_id") and "fencing_token" not in fields:
        lease.attempt_run_ids.append(fields["run_id"])


def _script_token(args: list[str]) -> str | None:
    """ARGV[1] of ``EVAL[SHA] script numkeys key... argv...``: the owner token in every lockrun script."""
    try:
        return args[3 + int(args[2])]
    except (IndexError, ValueError):
        return None


@dataclass
class Crossing:
    """A name granted again while the lease before it was still valid somewhere (a lossy failover)."""

    name: str
    at: float
    earlier: ServerLease
    later: ServerLease


@dataclass
class Replicated(Reconstruction):
    """``reconstruct_across``'s answer: the leases, and the evidence of split brains."""

    crossings: list[Crossing] = field(default_factory=list)
    stale_renewals: int = 0  # renewals on a server that still had a lease the cluster had moved past
    #: lock name -> (absolute expiry in ms, server, when) of every copy a replica applied
    copies: dict[str, list[tuple[int, str, float]]] = field(default_factory=dict)
    #: (when, replica, master) of every full resynchronisation: a snapshot no MONITOR shows
    snapshots: list[tuple[float, str, str]] = field(default_factory=list)

    def acknowledged_deadline(self, lease: ServerLease, replicas: int | None = None) -> float | None:
        """The deadline of ``lease`` as ``replicas`` other servers knew it (None: as many as its
        client's WAIT asked for, reset by reset): its last grant or reset that at least that many
        replicas applied, from the stream or from a full resynchronisation taken after it, plus
        its TTL. None when not even the grant reached that many."""
        for at, server, ttl, waited in reversed(lease.history):
            expected = at * 1000 + ttl * 1000
            holders = {where for expiry, where, seen in self.copies.get(lease.name, ())
                       if where != server and abs(expiry - expected) <= COPY_SLACK_MS and seen >= at - 0.01}
            # a snapshot of the master taken after the reset, unless the master's own data was
            # replaced in between (it was resynchronised from another one, as a replica)
            replaced = [synced for synced, replica, _ in self.snapshots if replica == server]
            holders |= {replica for synced, replica, master in self.snapshots if master == server and synced >= at
                        and not any(at <= other <= synced for other in replaced)}
            if len(holders) >= (waited if replicas is None else replicas):
                return at + ttl
        return None


def reconstruct_across(streams: list[tuple[int, str, list[str]]], prefix: str = "lockrun:",
                       snapshots: list[tuple[float, str, str]] = ()) -> Replicated:
    """Leases across a replicated deployment: ``streams`` is ``[(epoch, server, lines)]``, one per
    MONITOR connection (a server may have several: its lifetimes, and reattachments).

    Only what a server *executed* counts: the script calls (``lua`` lines) of a master, and the
    thief's commands, which come over the unix socket; what a replica applies from its master's
    stream (TCP, not lua) is a copy of the former. Events of all streams are merged on their
    timestamps (one host, one clock), and a lease is followed by its token from server to server.
    Its deadline is its last reset on any server plus its TTL.

    What a replica applied from its master's stream (``SET ... PXAT``, ``PEXPIREAT``) and the full
    resynchronisations in ``snapshots`` (``[(when, replica, master)]``, from the servers' logs) say
    which replicas had each grant and reset: ``Replicated.acknowledged_deadline``.

    Server death ends nothing here: a promoted replica carries the leases on. A grant while
    another lease of the name is still valid is a ``Crossing`` (what a lossy failover does; the
    earlier lease ends "superseded"), and a renewal of a superseded lease (a stale master that
    had not been demoted yet) counts among ``stale_renewals`` and extends nothing. Violations
    are what no server may do: extend or release a lease it never granted, or one already past
    its deadline.
    """
    # [at, epoch, order, server (or "thief"), [command args, *lua calls' args], client, WAIT's replicas]
    events: list[list] = []
    copies: dict[str, list[tuple[int, str, float]]] = {}
    for epoch, server, lines in streams:
        event: list | None = None  # the script whose lua calls follow (a script runs atomically)
        scripts: dict[str, list] = {}  # client -> its last script, which a WAIT of that client follows
        for raw in lines:
            parsed = parse_line(raw)
            if parsed is None or not parsed[2]:
                continue
            at, client, args = parsed
            if client == "lua":
                if event is not None:
                    event[4].append(args)
                continue
            verb = args[0].upper()
            if verb in ("EVAL", "EVALSHA"):
                event = scripts[client] = [at, epoch, len(events), server, [args], client, 0]
                events.append(event)
                continue
            event = None
            if verb == "WAIT" and client in scripts and len(args) > 1:
                scripts.pop(client)[6] = int(args[1])  # pipelined right behind the script, on its connection
            elif client.startswith("unix:") and len(args) > 1 and lock_name(args[1], prefix):
                events.append([at, epoch, len(events), "thief", [args], client, 0])
            else:
                copy = _replicated_expiry(args, prefix)
                if copy is not None:
                    copies.setdefault(copy[0], []).append((copy[1], server, at))
    events.sort(key=lambda e: (e[0], e[2]))

    out = Replicated(copies=copies, snapshots=list(snapshots))
    current: dict[str, ServerLease] = {}
    by_token: dict[str, ServerLease] = {}

    def end(lease: ServerLease, how: str, at: float) -> None:
        if lease.ended_at is None:
            if at >= lease.deadline:
                lease.end, lease.ended_at = "expired", lease.deadline
            else:
                lease.end, lease.ended_at = how, at

    for at, epoch, _, server, (command, *calls), _, waited in events:
        if server == "thief":
            name = lock_name(command[1], prefix)
            if name in current and command[0].upper() in ("DEL", "SET", "UNLINK", "GETDEL", "PEXPIRE", "EXPIRE"):
                end(current.pop(name), "stolen", at)
            continue
        token = _script_token(command)
        pending: ServerLease | None = None
        for args in calls:
            verb, key = args[0].upper(), (args[1] if len(args) > 1 else "")
            name = lock_name(key, prefix)
            if verb == "SET" and name and "NX" in (a.upper() for a in args[3:]):
                ttl_ms = int(args[args.index("PX") + 1]) if "PX" in args else 0
                pending = ServerLease(name, epoch, args[2], at, ttl_ms / 1000.0, at)
            elif verb == "SET" and pending is not None and lock_name(key, prefix, "fence"):
                earlier = current.get(pending.name)
                if earlier is not None:
                    if earlier.ended_at is None and at < earlier.deadline - EPSILON:
                        out.crossings.append(Crossing(pending.name, at, earlier, pending))
                        end(earlier, "superseded", at)
                    end(earlier, "replaced", at)
                current[pending.name] = by_token[pending.token] = pending
                pending.history.append((pending.acquired_at, server, pending.ttl, waited))
                out.leases.append(pending)
                pending = None
            elif verb == "HSET" and lock_name(key, prefix, "info") and ("fencing_token" in args or "run_id" in args):
                note_holder(current.get(lock_name(key, prefix, "info")), args)
            elif verb == "PEXPIRE" and name:
                lease = by_token.get(token)
                if lease is None or lease.name != name:
                    out.violations.append(f"{name!r} extended at {at:.3f} (lifetime {epoch}) for token "
                                          f"{str(token)[:8]}, which was never granted it")
                elif lease.end == "superseded":
                    out.stale_renewals += 1
                elif at > lease.deadline + EPSILON:
                    out.violations.append(f"{name!r} extended at {at:.3f} (lifetime {epoch}) after its lease "
                                          f"expired at {lease.deadline:.3f} everywhere")
                else:
                    lease.last_reset, lease.ttl = at, int(args[2]) / 1000.0
                    lease.resets += 1
                    lease.history.append((at, server, lease.ttl, waited))
            elif verb == "DEL" and name:
                lease = by_token.get(token)
                if lease is not None and current.get(name) is lease:
                    end(current.pop(name), "released", at)
    for lease in current.values():
        end(lease, "open", float("inf"))  # nothing ended it: it ran out
    return out


def _replicated_expiry(args: list[str], prefix: str) -> tuple[str, int] | None:
    """(name, absolute expiry ms) of a lock key's ``SET ... PXAT`` or ``PEXPIREAT`` as a replica
    applies it from its master's stream, else None."""
    verb = args[0].upper()
    name = lock_name(args[1], prefix) if len(args) > 2 else None
    try:
        if name and verb == "PEXPIREAT":
            return name, int(args[2])
        if name and verb == "SET" and "PXAT" in (a.upper() for a in args[3:]):
            return name, int(args[[a.upper() for a in args].index("PXAT") + 1])
    except (ValueError, IndexError):
        return None
    return None
