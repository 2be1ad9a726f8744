"""Redis Cluster: three masters and their replicas made by `redis-cli --cluster create`, hash-tagged keys,
status across nodes, --replicas asking each name's own master."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import redis

from tests.conftest import Hosts, free_port, history, run_lockrun, spawn_lockrun, stop_servers, tcp_reply, wait_until

pytestmark = pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli is needed to create a cluster")


class ClusterNodes(list):
    """The nodes' ports (three masters first, then a replica of each) and their processes."""

    def __init__(self, ports: list[int], procs: list[subprocess.Popen]) -> None:
        super().__init__(ports)
        self.procs = dict(zip(ports, procs, strict=True))


def _replicas_in_sync(port: int) -> int:
    role = tcp_reply(port, "ROLE", default=[b"", 0, []])
    return len(role[2]) if role[0] == b"master" else 0


@pytest.fixture(scope="module")
def cluster():
    folder = Path(tempfile.mkdtemp(prefix="lr-cluster-"))
    ports = [free_port() for _ in range(6)]
    procs = []
    for port in ports:
        node_dir = folder / str(port)
        node_dir.mkdir()
        procs.append(subprocess.Popen(
            # The bus port is named, not port + 10000, which overflows for high random ports.
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-port", str(free_port()), "--cluster-config-file", "nodes.conf", "--save", "",
             "--appendonly", "no", "--dir", str(node_dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))
    try:
        for port in ports:
            wait_until(lambda port=port: tcp_reply(port, "PING", default=False), what=f"cluster node {port}")
        subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                        "--cluster-replicas", "1", "--cluster-yes"], check=True, capture_output=True, timeout=60)
        for port in ports:
            wait_until(lambda port=port: b"cluster_state:ok" in tcp_reply(port, "CLUSTER", "INFO", default=b""),
                       timeout=30, what="cluster_state:ok")
        wait_until(lambda: sum(_replicas_in_sync(port) for port in ports) == 3, timeout=60,
                   what="every master's replica to sync")
        yield ClusterNodes(ports, procs)
    finally:
        stop_servers(procs, folder)


@pytest.fixture
def cluster_env(local_env, cluster):
    return {**local_env, "LOCKRUN_REDIS_URL": f"redis+cluster://127.0.0.1:{cluster[0]},127.0.0.1:{cluster[1]}/"}


def test_runs_busy_and_fencing_on_a_cluster(cluster_env, tmp_path):
    result = run_lockrun(cluster_env, "-n", "c1", "--", "sh", "-c", "echo $LOCKRUN_FENCING_TOKEN")
    assert (result.returncode, result.stderr) == (0, "")
    first = int(result.stdout)
    flag = tmp_path / "held"
    holder = spawn_lockrun(cluster_env, "-n", "c1", "--ttl", "3", "--", "sh", "-c", f"touch {flag}; sleep 4")
    try:
        wait_until(flag.exists, what="the holder")
        assert run_lockrun(cluster_env, "-n", "c1", "--", "true").returncode == 75
        started = time.monotonic()
        waited = run_lockrun(cluster_env, "-n", "c1", "-w", "30", "--", "sh", "-c", "echo $LOCKRUN_FENCING_TOKEN")
        assert waited.returncode == 0 and int(waited.stdout) > first  # after the holder, renewed past its TTL
        assert time.monotonic() - started > 2
    finally:
        holder.wait(30)


def test_status_lists_locks_across_all_nodes(cluster_env, cluster, tmp_path):
    names = [f"spread-{i}" for i in range(12)]
    slots = {redis.RedisCluster(host="127.0.0.1", port=cluster[0]).keyslot(f"lockrun:{{{n}}}:lock") for n in names}
    holders, flags = [], []
    for name in names:
        flag = tmp_path / name
        flags.append(flag)
        holders.append(spawn_lockrun(cluster_env, "-n", name, "--", "sh", "-c", f"touch {flag}; sleep 30"))
    try:
        wait_until(lambda: all(f.exists() for f in flags), timeout=60, what="all holders")
        locks = json.loads(run_lockrun(cluster_env, "status", "--json").stdout)["locks"]
        assert sorted(lock["name"] for lock in locks) == sorted(names)
        assert len(slots) > 3  # the names really live on different slots (and so nodes)
        slotted = run_lockrun(cluster_env, "-n", "sem", "--slots", "2", "--", "true")
        assert slotted.returncode == 0, slotted.stderr
    finally:
        for proc in holders:
            proc.terminate()
            proc.wait(30)


def test_an_unreachable_cluster_is_69(local_env):
    local_env["LOCKRUN_REDIS_URL"] = f"redis+cluster://127.0.0.1:{free_port()}/"
    result = run_lockrun(local_env, "-n", "x", "--", "true")
    assert result.returncode == 69 and result.stderr.count("\n") == 1
    assert run_lockrun(local_env, "status").returncode == 69


def test_bad_cluster_urls_are_usage_errors(local_env):
    for url in ("redis+cluster://", "redis+cluster://host/", "redis+cluster://h:1,h:notaport/"):
        local_env["LOCKRUN_REDIS_URL"] = url
        result = run_lockrun(local_env, "-n", "x", "--", "true")
        assert result.returncode == 2 and "cluster" in result.stderr


def test_the_fleet_record_on_a_cluster(cluster_env, tmp_path):
    hosts = Hosts(tmp_path, cluster_env["LOCKRUN_REDIS_URL"])
    names = [f"fleet-{i}" for i in range(6)]  # spread over the masters by their hash tags
    for i, name in enumerate(names):
        assert hosts.run("app-b", "-n", name, "--", "sh", "-c", f"exit {i}").returncode == i
    lock = hosts.json("app-a", "status", "fleet-3")["locks"][0]
    assert (lock["last_run"]["host"], lock["last_run"]["exit_code"]) == ("app-b", 3)
    rows = hosts.json("app-a", "history", "--fleet", "--limit", "100")
    assert [r["name"] for r in rows if r["name"] in names] == names[::-1]
    assert {r["host"] for r in rows if r["name"] in names} == {"app-b"}
    metrics = hosts.run("app-a", "metrics", "--fleet").stdout
    assert 'lockrun_last_exit_code{name="fleet-5"} 5' in metrics
    run_id = next(r["run_id"] for r in rows if r["name"] == "fleet-2")
    assert hosts.json("app-a", "show", run_id[:10], "--fleet")["exit_code"] == 2


def test_replicas_wait_on_each_names_own_master(cluster_env, cluster, tmp_path):
    """--replicas: the WAIT goes to the master owning the name's slot and counts that master's replicas."""
    client = redis.RedisCluster(host="127.0.0.1", port=cluster[0])
    try:
        shards: dict[int, tuple[str, int]] = {}  # master port -> (a name it owns, the port of its replica)
        for i in range(64):
            name = f"rep-{i}"
            primary, *replicas = client.nodes_manager.slots_cache[client.keyslot(f"lockrun:{{{name}}}:lock")]
            if replicas and primary.port not in shards:
                shards[primary.port] = (name, replicas[0].port)
    finally:
        client.close()
    assert len(shards) == 3
    for name, replica in shards.values():
        result = run_lockrun(cluster_env, "-n", name, "--ttl", "10", "--replicas", "all", "--", "sh", "-c",
                             "echo $LOCKRUN_FENCING_TOKEN")
        assert (result.returncode, result.stderr) == (0, ""), result.stderr
        with redis.Redis(port=replica, socket_timeout=2, protocol=2) as on_replica:
            on_replica.execute_command("READONLY")  # a cluster replica serves reads of its master's slots
            assert on_replica.get(f"lockrun:{{{name}}}:fence") == result.stdout.strip().encode()
    (paused_name, paused_replica), (other_name, _), _ = shards.values()
    cluster.procs[paused_replica].send_signal(signal.SIGSTOP)
    try:
        flag = tmp_path / "ran"
        for replicas in ("1", "all"):
            result = run_lockrun(cluster_env, "-n", paused_name, "--ttl", "10", "--replicas", replicas, "--",
                                 "touch", str(flag))
            assert result.returncode == 69 and "only 0 of 1 replica acknowledged the lock" in result.stderr
            assert result.stderr.count("\n") == 1 and not flag.exists()
        # another master's replica is not asked, so another name runs
        other = run_lockrun(cluster_env, "-n", other_name, "--ttl", "10", "--replicas", "1", "--", "true")
        assert other.returncode == 0
    finally:
        cluster.procs[paused_replica].send_signal(signal.SIGCONT)


def test_each_master_checks_its_own_eviction_policy(cluster_env, cluster):
    """README "A Redis that evicts keys": the acquire script runs on the name's own master and reads
    that master's INFO memory; status asks every master."""
    client = redis.RedisCluster(host="127.0.0.1", port=cluster[0])
    try:
        owner = {}  # master port -> a name it owns
        for i in range(64):
            name = f"ev-{i}"
            primary = client.nodes_manager.slots_cache[client.keyslot(f"lockrun:{{{name}}}:lock")][0]
            owner.setdefault(primary.port, name)
    finally:
        client.close()
    (evicting_port, evicting_name), (_, calm_name), _ = owner.items()
    tcp_reply(evicting_port, "CONFIG", "SET", "maxmemory", "100mb")
    tcp_reply(evicting_port, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    try:
        refused = run_lockrun(cluster_env, "-n", evicting_name, "--", "true")
        assert refused.returncode == 69 and "maxmemory-policy allkeys-lru" in refused.stderr
        assert refused.stderr.count("\n") == 1
        assert run_lockrun(cluster_env, "-n", calm_name, "--", "true").returncode == 0
        status = run_lockrun(cluster_env, "status")
        warnings = [line for line in status.stderr.splitlines() if "maxmemory-policy" in line]
        assert status.returncode == 0 and len(warnings) == 1 and f":{evicting_port}" in warnings[0], status.stderr
    finally:
        tcp_reply(evicting_port, "CONFIG", "SET", "maxmemory-policy", "noeviction")
        tcp_reply(evicting_port, "CONFIG", "SET", "maxmemory", "0")


def test_pauses_and_cadences_on_a_cluster(cluster_env):
    names = [f"spread-pause-{i}" for i in range(6)]  # across the masters' slots
    for name in names:
        assert run_lockrun(cluster_env, "-n", name, "--every", "1h", "--", "true").returncode == 0
    assert run_lockrun(cluster_env, "pause", *names[:3], "--for", "1h", "--reason", "spread").returncode == 0
    for name in names:
        skipped = run_lockrun(cluster_env, "-n", name, "--every", "1h", "--", "true")
        assert (skipped.returncode, skipped.stderr) == (0, "")
    rows = {row["name"]: row["status"] for row in history(cluster_env, limit=6)}
    assert rows == {name: "paused" if name in names[:3] else "succeeded" for name in names}
    every = json.loads(run_lockrun(cluster_env, "status", "--all", "--json").stdout)["locks"]
    by_name = {lock["name"]: lock for lock in every if lock["name"] in names}
    assert set(by_name) == set(names)
    assert [bool(by_name[name]["paused"]) for name in names] == [True] * 3 + [False] * 3
    assert all(by_name[name]["cadence"]["every_s"] == 3600.0 for name in names)
    plain = {lock["name"] for lock in json.loads(run_lockrun(cluster_env, "status", "--json").stdout)["locks"]}
    assert set(names[:3]) <= plain
    checked = run_lockrun(cluster_env, "check", *names)
    assert checked.returncode == 0 and checked.stdout.startswith(f"LOCKRUN OK - {names[0]} paused until")
    assert run_lockrun(cluster_env, "resume", *names[:3]).returncode == 0


def test_retry_attempts_on_a_cluster(cluster_env, tmp_path):
    """--retry's scripts (attempt over, attempt begins) name only the lock's own keys: one slot."""
    hosts = Hosts(tmp_path, cluster_env["LOCKRUN_REDIS_URL"])
    for name in ("retry-a", "retry-b", "retry-c"):  # on more than one master
        result = hosts.run("app-b", "-n", name, "--retry", "2", "--retry-delay", "0", "--", "false")
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        rows = hosts.json("app-a", "history", "--fleet", name)
        assert [row["attempt"] for row in rows] == [3, 2, 1]


def test_once_every_and_the_skips_list_on_a_cluster(cluster_env, cluster, tmp_path):
    # Both read keys the scripts derive from a declared one (the name's last, skips): on every master
    # they must be the name's own slot, or a Cluster refuses the script (CROSSSLOT) or reads nothing.
    hosts = Hosts(tmp_path, cluster_env["LOCKRUN_REDIS_URL"])
    names = [f"every-{i}" for i in range(6)]
    for name in names:
        work = tmp_path / f"{name}.work"
        for _ in range(2):
            done = hosts.run("app-a", "-n", name, "--once-every", "1h", "--", "sh", "-c", f"echo ran >> {work}")
            assert done.returncode == 0 and done.stderr == "", done.stderr
        assert work.read_text() == "ran\n"  # the second try found the first's success
        flag = tmp_path / f"{name}.held"
        holder = hosts.spawn("app-a", "-n", name, "--", "sh", "-c", f"touch {flag}; sleep 30")
        try:
            wait_until(flag.exists, what="the holder")
            assert hosts.run("app-b", "-n", name, "--", "true").returncode == 75
        finally:
            holder.terminate()
            holder.wait(30)
    text = hosts.run("app-a", "timeline", "--fleet", "--since", "1h", "--width", "120")
    assert text.returncode == 0, text.stderr
    for name in names:  # one duplicate and one busy skip each, placed from its skips list
        row = next(line for line in text.stdout.splitlines() if line.startswith(name + " ") and "|" in line)
        assert row.rsplit("|", 1)[1].split()[2] == "2", text.stdout


def test_doctor_audits_every_master(cluster_env, cluster):
    """docs/operating.md "Checking the setup: lockrun doctor": each master a name may land on is
    checked, one line per check each, and --probe's scratch keys (in several slots) are all removed."""
    result = run_lockrun(cluster_env, "doctor", "--json", "--probe")
    assert result.returncode in (0, 1), result.stdout + result.stderr  # no persistence on these nodes: WARN
    checks = json.loads(result.stdout)["checks"]
    (topology,) = [check for check in checks if check["check"] == "topology"]
    assert topology["status"] == "ok" and "3 masters" in topology["detail"], topology
    evictions = [check for check in checks if check["check"] == "eviction"]
    assert sorted(check["detail"].split(":", 2)[1] for check in evictions) == sorted(str(p) for p in cluster[:3])
    (probe,) = [check for check in checks if check["check"] == "probe"]
    assert probe["status"] == "ok", probe
    for port in cluster[:3]:
        assert tcp_reply(port, "SCAN", 0, "MATCH", "lockrun:doctor:*", "COUNT", 1000)[1] == []
