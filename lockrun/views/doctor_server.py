"""``lockrun doctor``'s judgement of one Redis server (docs/operating.md "Checking the setup:
lockrun doctor", docs/redis.md "What lockrun needs of Redis"): each function takes what the server
said and gives one Check. A value the server would not give is a WARN that says so, never an OK; a value that
makes runs fail or lets a job run twice is a FAIL.
"""

from __future__ import annotations

import re
import statistics
from typing import NamedTuple

from lockrun.backends.audit import InfoSection, ServerFacts, Unread
from lockrun.views.doctor_acl import not_found
from lockrun.views.doctor_check import FAIL, OK, WARN, Check, duration_text, said, seconds_text, unread_text

#: How far this host's clock may be from the server's before doctor says so: lockrun's leases and
#: heartbeats run on the server's clock, but --once-per periods, cron's start times, --min-hold's
#: purpose and the ledger's times are this host's (docs/redis.md "What lockrun needs of Redis",
#: its clock row).
CLOCK_TOLERANCE_S = 1.0
#: noeviction with maxmemory: used memory from this share of it on, acquires may soon be refused.
MEMORY_HIGH = 0.9
#: The oldest Redis lockrun's scripts run on (README "Quickstart": any Redis >= 5).
OLDEST_REDIS = (5, 0)


class Context(NamedTuple):
    """What the judgements need of the settings a run would use."""

    ttl: float  # the configured TTL (config ttl, or the default)
    call_s: float  # what a run allows one call with it (backends/connect.call_timeout_for)
    replicas: int | str  # the config file's replicas (0: none; "all")
    allow_eviction: bool
    min_hold: float | None
    cluster_url: bool  # the URL is redis+cluster://


def _field(section: InfoSection, key: str) -> str | None:
    return None if isinstance(section, Unread) else section.get(key)


def _int(value: str | Unread | None) -> int | None:
    """A whole number the server wrote in ASCII digits; None for anything else (int() would take
    other scripts' digits and spaces too)."""
    if value is None or isinstance(value, Unread) or not re.fullmatch(r"-?[0-9]{1,20}", value):
        return None
    return int(value)


def _human_bytes(count: int) -> str:
    for unit, size in (("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10)):
        if count >= size:
            return f"{count / size:g}{unit}" if count % size == 0 else f"{count / size:.1f}{unit}"
    return f"{count}b"


def reachable(facts: ServerFacts, context: Context) -> Check:
    if not facts.rtts_s:
        return Check("reachable", WARN, "answered, but no round trip could be measured")
    median, worst = statistics.median(facts.rtts_s), max(facts.rtts_s)
    measured = (f"a round trip takes {duration_text(median)} (median of {len(facts.rtts_s)}, at most"
                f" {duration_text(worst)})")
    allowed = f"a run allows {seconds_text(context.call_s)} a call with TTL {seconds_text(context.ttl)}"
    fix = ("a Redis nearer this host, or a longer --ttl (a call may take TTL/5, at most 5s; socket_timeout in the"
           " config file)")
    if median >= context.call_s:
        return Check("reachable", FAIL, f"{measured}, but {allowed}: runs would time out (exit 69) and lose their"
                                        " leases", fix)
    if worst > context.call_s / 2:
        return Check("reachable", WARN, f"{measured}, and {allowed}: a slow call may cost a renewal", fix)
    connected = f"; connecting took {duration_text(facts.connect_s)}" if facts.connect_s is not None else ""
    return Check("reachable", OK, f"{measured}{connected}; {allowed}")


def _kind_and_version(facts: ServerFacts) -> tuple[str, str] | None:
    server = facts.info.get("server", Unread("not asked"))
    if not isinstance(server, Unread):
        for kind, field in (("Valkey", "valkey_version"), ("Dragonfly", "dragonfly_version"),
                            ("KeyDB", "keydb_version"), ("Redis", "redis_version")):
            if field in server:
                name = server.get("server_name", "")
                return (name.capitalize() if name and kind == "Redis" else kind), server[field]
    if not isinstance(facts.hello, Unread) and facts.hello.get("version"):
        return facts.hello.get("server", "redis").capitalize(), facts.hello["version"]
    return None


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isascii() and ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def is_sentinel(facts: ServerFacts) -> bool:
    """The URL names a Sentinel itself (redis://SENTINEL): nothing but ``server`` applies to it."""
    return _mode(facts) == "sentinel"


def _mode(facts: ServerFacts) -> str | None:
    for field in ("redis_mode", "server_mode"):
        value = _field(facts.info.get("server", Unread("")), field)
        if value:
            return value
    return facts.hello.get("mode") if not isinstance(facts.hello, Unread) else None


def server(facts: ServerFacts, context: Context) -> Check:
    found = _kind_and_version(facts)
    mode = _mode(facts)
    unusable = _unusable(facts, context, mode)
    if unusable is not None:
        return unusable
    if found is None:
        return _version_unread(facts)
    kind, version = found
    where = f" ({mode})" if mode else ""
    if kind == "Redis" and _version(version) < OLDEST_REDIS:
        return Check("server", FAIL, f"{kind} {version}{where}: lockrun's scripts need Redis 5 or newer",
                     "upgrade Redis (or use Valkey)")
    return Check("server", OK, f"{kind} {version}{where}; scripting works")


def _unusable(facts: ServerFacts, context: Context, mode: str | None) -> Check | None:
    """The FAIL of a server lockrun cannot use as it is named: a Sentinel, no scripts, a Cluster node
    named as one server."""
    if mode == "sentinel":
        return Check("server", FAIL, "this is a Sentinel, not a Redis server: it holds no keys and runs no scripts",
                     "name the Sentinels and the service they watch: redis+sentinel://HOST:PORT,HOST:PORT/SERVICE"
                     " (docs/redis.md)")
    if isinstance(facts.script, Unread):
        return Check("server", FAIL, f"scripts cannot run here: EVAL answered {said(facts.script.why)!r}; every lease"
                                     " operation is one script", "let lockrun's user run EVAL (ACL SETUSER USER +eval),"
                                                                  " and do not rename or disable it")
    if mode == "cluster" and not context.cluster_url:
        return Check("server", FAIL, "this server is a Redis Cluster node, but the URL is not redis+cluster://: the"
                                     " names whose slots other nodes serve fail (MOVED)",
                     "name the cluster: redis+cluster://HOST:PORT,HOST:PORT/ (docs/redis.md)")
    return None


def _version_unread(facts: ServerFacts) -> Check:
    info = facts.info.get("server")
    why = info.why if isinstance(info, Unread) else "no version field"
    hello = facts.hello.why if isinstance(facts.hello, Unread) else "no version"
    words = unread_text("the kind and version of the server", Unread(f"INFO server: {why}; HELLO: {hello}"))
    return Check("server", WARN, f"scripting works; {words}", "let lockrun's user run INFO (ACL SETUSER USER +info)")


def eviction(facts: ServerFacts, context: Context) -> Check:
    memory = facts.info.get("memory", Unread("not asked"))
    limit, policy, source = _memory_limit(facts, memory)
    if limit is None or policy is None:
        return _eviction_unread(facts, memory, context.allow_eviction)
    if limit > 0 and policy != "noeviction":
        return _evicting(limit, policy, context.allow_eviction)
    if limit == 0:
        return Check("eviction", OK, f"no maxmemory ({source}): keys are never evicted")
    return _noeviction(limit, memory)


def _evicting(limit: int, policy: str, allow_eviction: bool) -> Check:
    anyway = "; runs go on anyway (allow_eviction = true)" if allow_eviction else "; runs refuse it (exit 69)"
    return Check("eviction", FAIL, f"maxmemory-policy {said(policy, 40)} with maxmemory {_human_bytes(limit)}:"
                                   f" keys may be evicted, and an evicted lock or --once mark lets a job run"
                                   f" twice{anyway}",
                 "CONFIG SET maxmemory-policy noeviction, and maxmemory-policy noeviction in redis.conf")


def _noeviction(limit: int, memory: InfoSection) -> Check:
    """A maxmemory with noeviction: OK, but a WARN when it is nearly full (acquires would be refused)."""
    used = _int(_field(memory, "used_memory"))
    share = f", {used / limit:.0%} of it used" if used is not None else ""
    if used is not None and used >= MEMORY_HIGH * limit:
        return Check("eviction", WARN, f"maxmemory {_human_bytes(limit)} with noeviction{share}: when it is full,"
                                       " acquires are refused (exit 69, out of memory)",
                     "raise maxmemory (CONFIG SET maxmemory …, and in redis.conf) or free memory")
    return Check("eviction", OK, f"maxmemory {_human_bytes(limit)} with maxmemory-policy noeviction{share}: keys are"
                                 " never evicted")


def _memory_limit(facts: ServerFacts, memory: InfoSection) -> tuple[int | None, str | None, str]:
    """maxmemory and maxmemory-policy, and where they were read: INFO memory, else CONFIG GET."""
    limit = _int(_field(memory, "maxmemory"))
    policy = _field(memory, "maxmemory_policy")
    if limit is not None and policy is not None:
        return limit, policy, "INFO memory"
    found = facts.config.get("maxmemory-policy")
    return _int(facts.config.get("maxmemory")), found if isinstance(found, str) else None, "CONFIG GET"


def _eviction_unread(facts: ServerFacts, memory: InfoSection, allow_eviction: bool) -> Check:
    why = memory.why if isinstance(memory, Unread) else "no maxmemory_policy in it"
    config = facts.config.get("maxmemory-policy")
    words = unread_text("maxmemory and maxmemory-policy", Unread(
        f"INFO memory: {why}; CONFIG GET: {config.why if isinstance(config, Unread) else 'no answer'}"))
    if allow_eviction:
        return Check("eviction", WARN, f"{words}; runs go on (allow_eviction = true)",
                     "let lockrun's user run INFO (ACL SETUSER USER +info)")
    return Check("eviction", FAIL, f"{words}: every run reads INFO memory first and refuses a server that does not"
                                   " say (exit 69)", "let lockrun's user run INFO (ACL SETUSER USER +info)")


def _aof(facts: ServerFacts) -> bool | Unread:
    persistence = facts.info.get("persistence", Unread("not asked"))
    enabled = _field(persistence, "aof_enabled")
    if enabled is not None:
        return enabled == "1"
    configured = facts.config.get("appendonly")
    if isinstance(configured, str):
        return configured == "yes"
    why = persistence.why if isinstance(persistence, Unread) else "no aof_enabled in it"
    return Unread(f"INFO persistence: {why}; CONFIG GET appendonly: "
                  f"{configured.why if isinstance(configured, Unread) else 'no answer'}")


def persistence(facts: ServerFacts) -> Check:
    aof = _aof(facts)
    fix = "CONFIG SET appendonly yes, and appendonly yes in redis.conf (or RDB snapshots: a save line)"
    if isinstance(aof, Unread):
        return Check("persistence", WARN, f"{unread_text('whether the server persists anything', aof)}: without"
                                          " persistence a restart forgets every lease",
                     "make sure the server has appendonly yes (or a save line): " + fix)
    if aof:
        return Check("persistence", OK, "appendonly yes: leases survive a restart")
    save = facts.config.get("save")
    if isinstance(save, Unread):
        return Check("persistence", WARN, f"appendonly no, and {unread_text('save', save)}: without RDB snapshots"
                                          " either, a restart forgets every lease", fix)
    if save is None or not save.strip():
        return Check("persistence", WARN, "no persistence (appendonly no, save \"\"): a restart forgets every lease,"
                                          " and a second holder can start at once", fix)
    return Check("persistence", OK, f"RDB snapshots (save {said(save, 60)}), appendonly no: a restart loses what"
                                    " changed since the last snapshot, leases included")


def appendfsync(facts: ServerFacts) -> Check | None:
    """None when the server keeps no append-only file (then appendfsync does nothing)."""
    if _aof(facts) is False:
        return None
    value = facts.config.get("appendfsync")
    fix = "CONFIG SET appendfsync everysec (or always), and the same in redis.conf"
    if isinstance(value, Unread) or value is None:
        why = value if isinstance(value, Unread) else Unread("no answer")
        return Check("appendfsync", WARN, unread_text("appendfsync", why) + ": with appendfsync no, a crash loses the"
                                                                            " leases of up to 30 s",
                     "make sure redis.conf says appendfsync everysec (or always)")
    if value == "no":
        return Check("appendfsync", WARN, "appendfsync no: the kernel writes the append-only file out when it likes"
                                          " (about every 30 s), and a crash loses the leases of that time", fix)
    return Check("appendfsync", OK, f"appendfsync {said(value, 20)}")


def role(facts: ServerFacts) -> Check:
    replication = facts.info.get("replication", Unread("not asked"))
    kind = _field(replication, "role") or (facts.role[0] if not isinstance(facts.role, Unread) else None)
    if kind is None:
        return _role_unread(facts, replication)
    if kind == "master":
        return Check("role", OK, "a master")
    if kind not in ("slave", "replica"):
        return Check("role", WARN, f"the server says it is a {said(kind, 20)}, neither a master nor a replica",
                     "point lockrun at a Redis master, or at the Sentinels that follow it (docs/redis.md)")
    of = _master_of(facts, replication)
    fix = (f"point lockrun at the master ({of}), or at the Sentinels that follow it (redis+sentinel://…/SERVICE):"
           " docs/redis.md")
    if _writable_replica(facts, replication):
        return Check("role", FAIL, f"a writable replica of {of}: its locks are not the master's, other hosts do not see"
                                   " them, and the next resync erases them", fix)
    return Check("role", FAIL, f"a read-only replica of {of}: every acquire is refused (READONLY, exit 69)", fix)


def _role_unread(facts: ServerFacts, replication: InfoSection) -> Check:
    why = replication.why if isinstance(replication, Unread) else "no role"
    words = f"INFO replication: {why}; ROLE: {facts.role.why if isinstance(facts.role, Unread) else '?'}"
    return Check("role", WARN, unread_text("whether this server is a master or a replica", Unread(words)),
                 "let lockrun's user run INFO or ROLE, or make sure the URL names a master")


def _master_of(facts: ServerFacts, replication: InfoSection) -> str:
    """A replica's master, ``host:port``, as INFO replication or ROLE names it; ``?`` when neither does."""
    host, port = _field(replication, "master_host"), _field(replication, "master_port")
    if host:
        return f"{host}:{port}"
    return facts.role[1] if not isinstance(facts.role, Unread) and len(facts.role) > 1 else "?"


def _writable_replica(facts: ServerFacts, replication: InfoSection) -> bool:
    read_only = _field(replication, "slave_read_only") or _field(replication, "replica_read_only")
    return read_only == "0" or (read_only is None and facts.config.get("replica-read-only") == "no")


def replicas(facts: ServerFacts, context: Context) -> Check | None:
    """None on a replica (the role check says what matters there)."""
    replication = facts.info.get("replication", Unread("not asked"))
    if (_field(replication, "role") or "master") != "master":
        return None
    attached = _attached(facts, replication)
    if attached is None:
        why = replication.why if isinstance(replication, Unread) else "no connected_slaves"
        words = unread_text("how many replicas are attached", Unread(f"INFO replication: {why}"))
        return Check("replicas", WARN, words, "let lockrun's user run INFO or ROLE")
    to_write = _int(facts.config.get("min-replicas-to-write"))
    refused = _writes_refused(context.replicas, attached, to_write)
    if refused is not None:
        return refused
    if attached == 0:
        return Check("replicas", OK, "no replica attached: nothing to lose in a failover")
    return _replicated(attached, _waits(context.replicas, to_write, _min_replicas_in_effect(replication, to_write)))


def _min_replicas_in_effect(replication: InfoSection, to_write: int | None) -> bool:
    # INFO shows min_slaves_good_slaves only while min-replicas-to-write (and -max-lag) are in effect.
    return (to_write or 0) > 0 if isinstance(replication, Unread) else "min_slaves_good_slaves" in replication


def _replicated(attached: int, waits: list[str]) -> Check:
    """Replicas attached: OK when writes wait for them, else a WARN (a failover can lose a lease)."""
    if waits:
        return Check("replicas", OK, f"{_replicas_text(attached)} attached; {', '.join(waits)}")
    return Check("replicas", WARN, f"{_replicas_text(attached)} attached, but neither min-replicas-to-write nor"
                                   " lockrun's replicas setting: replication is asynchronous, and a failover can lose"
                                   " a lease",
                 "replicas = 1 in the config file (or --replicas 1 on every run; docs/redis.md \"Leases that survive a"
                 " failover\"), or CONFIG SET min-replicas-to-write 1 (and in redis.conf)")


def _attached(facts: ServerFacts, replication: InfoSection) -> int | None:
    """How many replicas the master has: INFO replication, else ROLE; None when neither says."""
    attached = _int(_field(replication, "connected_slaves"))
    if attached is None and not isinstance(facts.role, Unread) and facts.role[:1] == ("master",):
        attached = len(facts.role) - 1
    return attached


def _replicas_text(count: int) -> str:
    return f"{count} {'replica' if count == 1 else 'replicas'}"


def _writes_refused(wanted: int | str, attached: int, to_write: int | None) -> Check | None:
    """The FAIL when the config file or the server asks for more replicas than are attached."""
    if wanted == "all" and attached == 0:
        return Check("replicas", FAIL, "replicas = \"all\" in the config file, but the master has no replica: every"
                                       " acquire fails (exit 69)",
                     "replicas = 0 in the config file, or attach replicas")
    if isinstance(wanted, int) and wanted > attached:
        return Check("replicas", FAIL, f"replicas = {wanted} in the config file, but {_replicas_text(attached)}"
                                       " attached: every acquire fails (exit 69)",
                     f"replicas = {attached} in the config file, or attach replicas")
    if to_write is not None and to_write > attached:
        return Check("replicas", FAIL, f"min-replicas-to-write {to_write}, but {_replicas_text(attached)} attached:"
                                       " every write is refused (NOREPLICAS, exit 69)",
                     f"CONFIG SET min-replicas-to-write {attached}, and in redis.conf")
    return None


def _waits(wanted: int | str, to_write: int | None, in_effect: bool) -> list[str]:
    """What makes a write wait for replicas: lockrun's replicas setting, the server's min-replicas-to-write."""
    waits = []
    if wanted:
        waits.append(f"runs wait for {wanted} (replicas = {wanted!r} in the config file)".replace("'", '"'))
    if in_effect:
        waits.append(f"min-replicas-to-write {to_write if to_write is not None else 'in effect'}")
    return waits


def clock(facts: ServerFacts, context: Context) -> Check:
    if isinstance(facts.clock, Unread):
        return Check("clock", WARN, unread_text("the server's clock (TIME)", facts.clock),
                     "let lockrun's user run TIME (ACL SETUSER USER +time): every run's scripts call it")
    reading = facts.clock
    skew = (reading.sent_s + reading.received_s) / 2 - reading.server_s
    margin = (reading.received_s - reading.sent_s) / 2
    way = "ahead of" if skew > 0 else "behind"
    measured = f"this host's clock is {duration_text(abs(skew))} {way} the server's TIME (±{duration_text(margin)})"
    if abs(skew) - margin <= CLOCK_TOLERANCE_S:
        return Check("clock", OK, measured)
    hold = (f"; more than min_hold ({seconds_text(context.min_hold)}): a short job may run twice"
            if context.min_hold is not None and abs(skew) - margin > context.min_hold else "")
    return Check("clock", WARN, f"{measured}: leases and heartbeats run on the server's clock, but --once-per periods,"
                                f" cron's start times and the ledger run on this host's{hold}",
                 "keep this host's clock on NTP (timedatectl set-ntp true, or chrony/ntpd)")


def commands(facts: ServerFacts) -> Check:
    """Commands lockrun sends that the server does not know (renamed or disabled): COMMAND INFO
    says, or else the ACL's answers, when they cover every command."""
    runs_need = {need.command: need.runs for need in facts.acl.needed}
    unknown = _unknown_commands(facts, runs_need)
    if isinstance(unknown, Unread):
        return Check("commands", WARN, unread_text("which commands the server knows", unknown),
                     "let lockrun's user run COMMAND INFO, or make sure no rename-command line names a command"
                     " lockrun sends (docs/redis.md)")
    if not unknown:
        return Check("commands", OK, f"the server knows every command lockrun sends ({len(runs_need)})")
    for_runs = [command for command in unknown if runs_need.get(command, True)]
    fix = f"lockrun sends them by their own names: remove the rename-command lines of {', '.join(unknown)}"
    if for_runs:
        return Check("commands", FAIL, f"the server does not know {', '.join(unknown)} (renamed or disabled): runs"
                                       " fail (exit 69)", fix)
    return Check("commands", WARN, f"the server does not know {', '.join(unknown)} (renamed or disabled): status,"
                                   " unlock, pause or history --fleet fail", fix)


def _unknown_commands(facts: ServerFacts, runs_need: dict[str, bool]) -> list[str] | Unread:
    """The commands the server does not know: COMMAND INFO's answer, or else the ACL's answers when
    they cover every command a run sends; Unread when neither says."""
    if not isinstance(facts.unknown_commands, Unread):
        return list(facts.unknown_commands)
    if facts.acl.unread is None and {trial.command for trial in facts.acl.trials} >= set(runs_need):
        return sorted({trial.command for trial in facts.acl.trials if trial.allowed is None and not_found(trial)})
    return Unread(f"COMMAND INFO: {facts.unknown_commands.why}")
