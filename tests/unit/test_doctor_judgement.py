"""``lockrun doctor``'s judgements on what servers and directories said (views/doctor_*.py), for the
answers the servers the tests start cannot give: a Redis 6 without ACL DRYRUN, a managed Redis that
answers nothing, Sentinels that disagree, a broken Cluster, a network file system."""

from __future__ import annotations

from lockrun.backends.audit import (
    AclFacts,
    AclTrial,
    ClockReading,
    ClusterFacts,
    Need,
    ProbeFacts,
    SentinelFacts,
    ServerFacts,
    Topology,
    Unread,
)
from lockrun.system.directory import DirectoryFacts, mount_of
from lockrun.views import doctor_server as judge
from lockrun.views.doctor import DoctorReport
from lockrun.views.doctor_acl import acl as judge_acl
from lockrun.views.doctor_check import Check, duration_text
from lockrun.views.doctor_host import directory_check
from lockrun.views.doctor_topology import probe_check, topology_check

CONTEXT = judge.Context(ttl=60.0, call_s=5.0, replicas=0, allow_eviction=False, min_hold=None, cluster_url=False)
DENIED = Unread("NOPERM this user has no permissions to run the 'config|get' command")
NEEDED = (Need("EVAL", "every run", True, True), Need("HSET", "every run", True, True),
          Need("BLPOP", "--wait", True, True), Need("SCAN", "status, unlock, pause, history --fleet", False, False))


def server(**changes: object) -> ServerFacts:
    base = ServerFacts(
        where="redis://h:6379/0", connect_s=0.001, rtts_s=(0.0002,) * 5,
        info={"server": {"redis_version": "7.2.4"}, "memory": {"maxmemory": "0", "maxmemory_policy": "noeviction"},
              "persistence": {"aof_enabled": "1"}, "replication": {"role": "master", "connected_slaves": "0"}},
        config={"appendfsync": "everysec", "save": ""}, role=("master",), hello=Unread("not asked"), script="ok",
        clock=ClockReading(1000.0, 1000.0, 1000.001), unknown_commands=(),
        acl=AclFacts("app", "ACL GETUSER", everything=True, needed=NEEDED),
    )
    return base._replace(**changes)  # type: ignore[arg-type]


def statuses(*checks: Check | None) -> list[str]:
    return [check.status for check in checks if check is not None]


def test_a_managed_redis_that_answers_nothing_is_never_ok() -> None:
    """INFO and CONFIG both refused: every check that needs them says it could not read them."""
    mute = server(info=dict.fromkeys(("server", "memory", "persistence", "replication"), DENIED),
                  config=dict.fromkeys(("maxmemory", "maxmemory-policy", "appendonly", "appendfsync", "save",
                                        "min-replicas-to-write", "replica-read-only"), DENIED),
                  role=DENIED, clock=DENIED, unknown_commands=DENIED)
    checks = [judge.server(mute, CONTEXT), judge.eviction(mute, CONTEXT), judge.persistence(mute),
              judge.appendfsync(mute), judge.role(mute), judge.replicas(mute, CONTEXT), judge.clock(mute, CONTEXT)]
    assert "ok" not in statuses(*checks)
    assert all("could not read" in check.detail for check in checks if check is not None)
    eviction = judge.eviction(mute, CONTEXT)
    assert eviction.status == "fail" and "refuses a server that does not say" in eviction.detail
    allowed = judge.eviction(mute, CONTEXT._replace(allow_eviction=True))
    assert allowed.status == "warn"


def test_eviction_is_read_from_config_when_info_is_refused() -> None:
    facts = server(info={"memory": DENIED}, config={"maxmemory": "1048576", "maxmemory-policy": "volatile-lru"})
    check = judge.eviction(facts, CONTEXT)
    assert check.status == "fail" and "volatile-lru with maxmemory 1mb" in check.detail
    full = server(info={"memory": {"maxmemory": "1000", "maxmemory_policy": "noeviction", "used_memory": "950"}})
    assert judge.eviction(full, CONTEXT).status == "warn"


def test_replicas_and_min_replicas_to_write() -> None:
    two = {"role": "master", "connected_slaves": "2"}
    assert judge.replicas(server(info={"replication": two}), CONTEXT).status == "warn"  # type: ignore[union-attr]
    guarded = {**two, "min_slaves_good_slaves": "2"}  # INFO shows it only while min-replicas-to-write is in effect
    found = judge.replicas(server(info={"replication": guarded}, config={"min-replicas-to-write": DENIED}), CONTEXT)
    assert found is not None and found.status == "ok"
    too_many = judge.replicas(server(info={"replication": two}, config={"min-replicas-to-write": "3"}), CONTEXT)
    assert too_many is not None and too_many.status == "fail" and "NOREPLICAS" in too_many.detail
    config_all = judge.replicas(server(), CONTEXT._replace(replicas="all"))
    assert config_all is not None and config_all.status == "fail"
    replica = {"role": "slave", "master_host": "m", "master_port": "6379", "slave_read_only": "0"}
    assert judge.replicas(server(info={"replication": replica}), CONTEXT) is None
    role = judge.role(server(info={"replication": replica}))
    assert role.status == "fail" and "writable replica of m:6379" in role.detail


def test_the_clock_is_judged_beyond_the_round_trips_uncertainty() -> None:
    assert judge.clock(server(clock=ClockReading(1000.0, 1000.5, 1000.5)), CONTEXT).status == "ok"
    ahead = judge.clock(server(clock=ClockReading(1000.0, 1005.0, 1005.0)), CONTEXT._replace(min_hold=2.0))
    assert ahead.status == "warn" and "5.00 s ahead" in ahead.detail and "min_hold" in ahead.detail
    slow = judge.clock(server(clock=ClockReading(1000.0, 998.0, 1004.0)), CONTEXT)  # ±3 s: cannot tell
    assert slow.status == "ok"


def test_round_trips_against_what_a_run_allows() -> None:
    assert judge.reachable(server(rtts_s=(0.3,) * 5), CONTEXT._replace(call_s=0.2)).status == "fail"
    assert judge.reachable(server(rtts_s=(0.01, 0.01, 0.15)), CONTEXT._replace(call_s=0.2)).status == "warn"
    assert judge.reachable(server(), CONTEXT).status == "ok"


def test_the_server_line() -> None:
    assert judge.server(server(info={"server": {"redis_version": "4.0.9"}}), CONTEXT).status == "fail"
    valkey = judge.server(server(info={"server": {"redis_version": "7.2.4", "server_name": "valkey",
                                                  "valkey_version": "8.1.0"}}), CONTEXT)
    assert valkey.detail.startswith("Valkey 8.1.0")
    node = judge.server(server(info={"server": {"redis_version": "7.2.4", "redis_mode": "cluster"}}), CONTEXT)
    assert node.status == "fail" and "redis+cluster://" in (node.fix or "")
    assert judge.server(server(script=Unread("NOPERM eval")), CONTEXT).status == "fail"
    sentinel = judge.server(server(info={"server": {"redis_version": "7.0.15", "redis_mode": "sentinel"}},
                                   script=Unread("unknown command 'EVAL'")), CONTEXT)
    assert sentinel.status == "fail" and "redis+sentinel://" in (sentinel.fix or "")
    hello = judge.server(server(info={"server": DENIED}, hello={"server": "redis", "version": "6.2.1"}), CONTEXT)
    assert hello.status == "ok" and "Redis 6.2.1" in hello.detail


def acl(*trials: AclTrial, how: str = "redis.acl_check_cmd", unread: str | None = None) -> Check:
    facts = AclFacts("app", how, trials, unread=unread, needed=NEEDED, registry="lockrun:names")
    return judge_acl(facts, "lockrun:")


def test_acl_check_cmd_tells_a_refused_key_from_a_refused_command() -> None:
    ok = AclTrial("EVAL", None, True)
    name_key, registry = "lockrun:{doctor}:info", "lockrun:names"
    keys = acl(ok, AclTrial("EVAL", name_key, True), AclTrial("EVAL", registry, False),
               AclTrial("HSET", name_key, True), AclTrial("HSET", registry, False))
    assert keys.status == "fail" and "may not use the key lockrun:names" in keys.detail and "HSET" not in keys.detail
    assert "~lockrun:*" in (keys.fix or "")
    command = acl(ok, AclTrial("EVAL", name_key, True), AclTrial("HSET", name_key, False),
                  AclTrial("SCAN", None, True))
    assert command.status == "fail" and "may not run HSET (every run)" in command.detail
    reads = acl(ok, AclTrial("EVAL", name_key, True), AclTrial("SCAN", None, False))
    assert reads.status == "warn" and "SCAN" in reads.detail and "+scan" in (reads.fix or "")
    assert acl(ok, AclTrial("EVAL", name_key, True), AclTrial("HSET", name_key, True)).status == "ok"


def test_acl_dryrun_words_name_the_key_or_the_command() -> None:
    key = AclTrial("HSET", "lockrun:names", False, "This user has no permissions to access the 'lockrun:names' key")
    command = AclTrial("BLPOP", "lockrun:{doctor}:info", False,
                       "This user has no permissions to run the 'blpop' command")
    check = acl(AclTrial("EVAL", None, True), key, command, how="ACL DRYRUN")
    assert check.status == "fail" and "BLPOP (--wait)" in check.detail and "lockrun:names" in check.detail
    assert "HSET" not in check.detail


def test_an_acl_that_cannot_be_asked_is_a_warning() -> None:
    redis6 = acl(how="ACL GETUSER", unread="this server cannot be asked about each command (Redis 6)")
    assert redis6.status == "warn" and "acl|dryrun" in (redis6.fix or "")
    everything = judge_acl(AclFacts("default", "ACL GETUSER", everything=True), "lockrun:")
    assert everything.status == "ok"
    eval_refused = acl(AclTrial("EVAL", None, False, "NOPERM this user has no permissions to run the 'eval' command"),
                       how="EVAL", unread="the other commands could not be asked about")
    assert eval_refused.status == "fail" and "may not run EVAL" in eval_refused.detail


def test_unknown_commands() -> None:
    gone = judge.commands(server(unknown_commands=("BLPOP",)))
    assert gone is not None and gone.status == "fail" and "rename-command" in (gone.fix or "")
    reads = judge.commands(server(unknown_commands=("SCAN",)))
    assert reads is not None and reads.status == "warn"
    # COMMAND INFO refused, and the ACL asked about EVAL alone: which commands exist is unknown, never OK.
    refused = server(unknown_commands=DENIED, acl=AclFacts("u", "EVAL", (AclTrial("EVAL", None, False, "NOPERM"),),
                                                            unread="EVAL and ACL DRYRUN refused", needed=NEEDED))
    assert judge.commands(refused).status == "warn"
    dryrun = (AclTrial("EVAL", None, True), AclTrial("HSET", "k", True), AclTrial("SCAN", None, True),
              AclTrial("BLPOP", "k", None, "ERR Command 'blpop' not found"))
    asked = judge.commands(server(unknown_commands=DENIED, acl=AclFacts("u", "ACL DRYRUN", dryrun, needed=NEEDED)))
    assert asked.status == "fail" and "BLPOP" in asked.detail


def test_sentinels_and_clusters() -> None:
    sentinel = SentinelFacts("mymaster", ("a:1", "b:1", "c:1"), (), ("m:6379",), 2, "master", 1, 3)
    assert topology_check(Topology("sentinel", sentinel=sentinel), 1).status == "ok"
    split = sentinel._replace(masters=("m:6379", "n:6379"))
    assert topology_check(Topology("sentinel", sentinel=split), 1).status == "fail"
    silent = sentinel._replace(silent=(("c:1", "Connection refused"),))
    found = topology_check(Topology("sentinel", sentinel=silent), 1)
    assert found.status == "warn" and "2 of 3 Sentinels" in found.detail
    down = sentinel._replace(flags="master,s_down")
    assert topology_check(Topology("sentinel", sentinel=down), 1).status == "warn"
    cluster = ClusterFacts("ok", 16384, ("a:1", "b:1", "c:1"))
    assert topology_check(Topology("cluster", cluster=cluster), 3).status == "ok"
    broken = cluster._replace(state="fail", slots_ok=10000)
    assert topology_check(Topology("cluster", cluster=broken), 3).status == "fail"


def test_the_probe() -> None:
    good = ProbeFacts("lockrun:doctor:h:1:", 5.0, 10, "busy", "renewed", 11, 0.002, None, 7, 7, ("k",) * 6, ())
    assert probe_check(good).status == "ok" and "DBSIZE 7 before and 7 after" in probe_check(good).detail
    others = good._replace(keys_after=9)
    assert probe_check(others).status == "ok" and "other clients wrote meanwhile" in probe_check(others).detail
    assert probe_check(good._replace(contender="acquired")).status == "fail"
    assert probe_check(good._replace(renewal="lost")).status == "fail"
    assert probe_check(good._replace(second_fence=10)).status == "fail"
    assert probe_check(good._replace(handover_s=5.0)).status == "warn"
    left = probe_check(good._replace(left=("lockrun:doctor:h:1:{probe}:fence",)))
    assert left.status == "fail" and "redis-cli" in (left.fix or "")
    refused = probe_check(good._replace(failure="the first holder's acquire: no permissions to access one of the keys"))
    assert refused.status == "fail" and "ACL SETUSER USER ~lockrun:*)" in (refused.fix or "")
    assert probe_check(None).status == "ok"


def directory(**changes: object) -> DirectoryFacts:
    base = DirectoryFacts("/var/lib/lockrun", "the state directory", True, True, 0, 0o700, "ext4", "/", our_uid=0)
    return base._replace(**changes)  # type: ignore[arg-type]


def test_directories() -> None:
    assert directory_check(directory(), local=True).status == "ok"
    assert directory_check(directory(mode=0o777), local=False).fix == "chmod 700 /var/lib/lockrun"
    assert directory_check(directory(mode=0o755), local=True).status == "warn"
    assert directory_check(directory(uid=1234), local=True).status == "fail"
    assert directory_check(directory(fs_type="nfs4"), local=True).status == "fail"
    assert directory_check(directory(fs_type="nfs4"), local=False).status == "warn"
    assert directory_check(directory(fs_type="tmpfs"), local=True).status == "warn"
    assert directory_check(directory(read_only=True), local=False).status == "fail"
    above = directory_check(directory(above="the state directory /x/y is inside /x, which is writable by group or"
                                            " others (mode 0777); refusing it: chmod go-w /x"), local=True)
    assert above.status == "fail" and above.fix == "chmod go-w /x"
    missing = directory_check(directory(exists=False, is_dir=False, uid=None, mode=None), local=True)
    assert missing.status == "ok" and "the first run creates it" in missing.detail


def test_mount_of_reads_mountinfo() -> None:
    mountinfo = ("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
                 "30 22 0:25 / /var/lib/lock\\040run rw - nfs4 server:/x rw\n"
                 "31 22 0:26 / /var/lib rw - tmpfs tmpfs rw\n")
    assert mount_of("/var/lib/lock run/locks", mountinfo) == ("/var/lib/lock run", "nfs4")
    assert mount_of("/var/lib/lockrun", mountinfo) == ("/var/lib", "tmpfs")
    assert mount_of("/etc", mountinfo) == ("/", "ext4")


def test_verdicts_and_exit_codes() -> None:
    ok, warn, fail = Check("a", "ok", "x"), Check("b", "warn", "y", "z"), Check("c", "fail", "w", "v")
    assert DoctorReport((ok,)).exit_code == 0 and DoctorReport((ok, warn)).exit_code == 1
    assert DoctorReport((warn, fail, ok)).verdict == "fail"
    assert DoctorReport((ok,), could_not_check=True).as_json() == {
        "verdict": "unknown", "checks": [{"check": "a", "status": "ok", "detail": "x", "fix": None}]}
    assert duration_text(0.00005) == "0.05 ms" and duration_text(0.0123) == "12.3 ms" and duration_text(2) == "2.00 s"
