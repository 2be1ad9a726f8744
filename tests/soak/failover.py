"""The failover soak: --replicas 0, 1, 2 and all against a master, two replicas and three Sentinels,
while a seeded injector forces failovers besides the fault soak's own faults.

Layout:

* three ``redis-server`` processes; each behind its own :class:`~tests.soak.proxy.FaultyProxy`
  and announcing the proxy's port (``replica-announce-port``), so that everything reaches a
  server through its proxy: the replicas' links to their master, the Sentinels, and lockrun
  (which learns the master's address from the Sentinels);
* three Sentinels (quorum 2, ``down-after-milliseconds`` 1000);
* a MONITOR connection per server, reattached whenever a failover's ``CLIENT KILL TYPE normal``
  cuts it (the server's proxy refuses new connections until it is back);
* contenders in four groups, one name each: ``r0-job`` runs with ``--replicas 0`` (three
  contenders), ``r1-job`` with ``--replicas 1``, ``r2-job`` with ``--replicas 2`` (every replica),
  ``rall-job`` with ``--replicas all`` (two each), all through the same faults.

The faults (``FAILOVER_FAULTS``): ``SENTINEL FAILOVER``; a *lossy* failover (the master's bytes to
its replicas are swallowed, a command is granted meanwhile, then ``SENTINEL FAILOVER``); SIGKILL of
the master (it comes back empty, as a replica); SIGSTOP of the master beyond
``down-after-milliseconds`` (the Sentinels promote a replica, then it resumes as a stale master);
and the fault soak's own: a short master pause, a paused replica, a replication stall, ``CLIENT
KILL``, stolen keys, SIGKILL and SIGSTOP of holders, and dropped, delayed and blackholed
connections to the master (a blackhole beyond ``down-after-milliseconds`` is a partition, and
the Sentinels fail over). A demoted master that the Sentinels have not reconfigured yet (they do
at their next INFO, up to 10 s later) is reconfigured by the harness after a seeded 1-5 s, as
they would: ``REPLICAOF`` the new master and ``CLIENT KILL TYPE normal``.

The verdict (:meth:`FailoverSoak.verdict`) rebuilds every lease across all servers with
:func:`~tests.soak.oracle.reconstruct_across`, with each lease's deadline as the replicas knew it
(the copies they applied, and the full resynchronisations in the masters' logs), and holds
``--replicas 2`` and ``all`` to every promise of the fault soak, server death no excuse: zero
overlapping commands, each stopped before its lease's deadline as the replicas it waited for knew
it. ``--replicas 0`` is held to the promises failovers do not break (the ledger,
fencing, no traceback, no orphan); its overlaps and late commands are counted, not failed on: they
show the checker catching what a lossy failover does. ``--replicas 1`` waits for one of the two
replicas, which is not always the one promoted: while the old master still takes writes (a
``SENTINEL FAILOVER``, a partition), the other replica acknowledges them and then follows the new
master without them. Its overlaps are counted too, and each must follow a switch of masters (in
the Sentinels' logs) that did not SIGKILL the old master; one that does not fails the soak.

``python -m tests.soak --failover --seed 7 --runs 10``.
"""

from __future__ import annotations

import dataclasses
import re
import signal
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import redis

from tests.conftest import RedisServer, free_port, isolated_env
from tests.soak.harness import CommandLog, Invocation, Soak
from tests.soak.oracle import EPSILON, MonitorRecorder, reconstruct_across
from tests.soak.proxy import FaultyProxy

GROUPS = ("0", "1", "2", "all")  # --replicas of each group of contenders (two replicas: 2 is every one)
#: How many replicas must have applied a reset for it to count, per group (all: as many as the
#: WAIT behind it asked for: both, or one while the other is down)
ACKNOWLEDGED_BY = {"0": 0, "1": 1, "2": 2, "all": None}
#: How long a master that lost its place may still take writes (the Sentinels demote it at their
#: next INFO of it, up to 10 s after the switch), so that a --replicas 1 lease granted by it
#: after the switch is still "after a failover with the old master up".
STALE_FOR = 10.0
SERVICE = "mymaster"
DOWN_AFTER_MS = 1000

FAILOVER_FAULTS = {  # kind: weight in the random part of the schedule
    "failover": 1.5,           # SENTINEL FAILOVER
    "lossy-failover": 2.0,     # replication stalled, a command granted meanwhile, then SENTINEL FAILOVER
    "master-kill": 1.0,        # SIGKILL of the master; a replica is promoted; it comes back empty as a replica
    "master-stop": 1.0,        # SIGSTOP of the master beyond down-after-milliseconds, SIGCONT after the promotion
    "master-pause": 1.0,       # SIGSTOP ... SIGCONT of the master, shorter than down-after-milliseconds
    "replica-pause": 1.0,      # SIGSTOP ... SIGCONT of a replica
    "replication-stall": 1.0,  # the master's bytes to its replicas swallowed for a while
    "client-kill": 1.0,        # CLIENT KILL of every lockrun connection to the master
    "steal": 1.5,              # the lock key deleted or overwritten on the master
    "holder-kill": 1.5,        # SIGKILL a lockrun whose command is running
    "holder-pause": 1.5,       # SIGSTOP ... SIGCONT a lockrun whose command is running
    "proxy-drop": 1.0,         # every connection to the master reset
    "proxy-delay": 1.0,        # every byte to and from the master late
    "proxy-blackhole": 1.0,    # every byte to and from the master lost (beyond 1 s: a partition)
}
FAILOVERS = ("failover", "lossy-failover", "master-kill", "master-stop")
#: Seconds a master that lost its place keeps it before the harness reconfigures it as a replica
#: (the Sentinels do it at their next INFO of it, up to 10 s after the switch).
DEMOTE_AFTER = (1.0, 5.0)


def group_of(name: str) -> str:
    """``r1-job`` -> ``1``: the --replicas its contenders use."""
    return name.split("-", 1)[0][1:]


class Node:
    """One redis-server behind its proxy; a server announces its proxy's address."""

    def __init__(self, label: str, logs: Path) -> None:
        self.label = label
        self.logs = logs
        self.server = RedisServer()
        self.proxy = FaultyProxy(self.server.port).start()
        self.up = False  # between a SIGKILL and the restart, no MONITOR is reattached

    def start(self, master: Node | None) -> None:
        self.server.args = ["--replica-announce-ip", "127.0.0.1", "--replica-announce-port", str(self.proxy.port),
                            "--repl-diskless-sync-delay", "0", "--logfile", str(self.logs / f"redis-{self.label}.log")]
        if master is not None:
            self.server.args += ["--replicaof", "127.0.0.1", str(master.proxy.port)]
        self.server.start()
        self.up = True

    def client(self) -> redis.Redis:
        return self.server.client()

    def role(self) -> tuple[str, int]:
        """("master", replicas in sync) or ("slave", port of its master's proxy); ("?", 0) when it cannot say."""
        try:
            with self.client() as client:
                reply = client.execute_command("ROLE")
        except redis.RedisError:
            return "?", 0
        role = reply[0].decode()
        return (role, len(reply[2])) if role == "master" else (role, int(reply[2]) if role == "slave" else 0)


class FailoverSoak(Soak):
    FAULT_WEIGHTS = FAILOVER_FAULTS
    FAULT_GAP = (1.0, 3.0)  # room between faults for runs that get through: most faults here stop them all
    DAEMON_SHARE = 0.0  # daemons are the fault soak's business (invariant 8); this one checks failovers

    def __init__(self, seed: int, duration: float, workdir: Path, contenders: int = 9,
                 ttls: tuple[int, ...] = (2, 3, 4)) -> None:
        super().__init__(seed, duration, workdir, contenders=contenders, names=len(GROUPS), ttls=ttls)
        self.names = [f"r{group}-job" for group in GROUPS]  # r0-job, r1-job, r2-job, rall-job
        self.nodes: list[Node] = []
        self.sentinel_ports: list[int] = []
        self._sentinels: list[subprocess.Popen] = []
        self.streams: list[tuple[int, str, MonitorRecorder]] = []
        self.gaps: list[tuple[str, float, float]] = []  # MONITOR cut and reattached: (server, cut, back)
        self.failovers: list[str] = []  # "a -> b (kind, 0.4 s)"
        self.unhealed: list[str] = []
        self.crossings: dict[str, int] = dict.fromkeys(GROUPS, 0)
        self.overlaps: dict[str, int] = dict.fromkeys(GROUPS, 0)
        self.after_live_failover: dict[str, int] = dict.fromkeys(GROUPS, 0)
        self.broken: dict[str, list[str]] = {group: [] for group in GROUPS}  # what --replicas 0 and 1 broke
        self.crossing_notes: list[str] = []
        self._switch_times: list[float] | None = None
        self.stale_renewals = 0
        self._closing = False
        self._monitor_lock = threading.Lock()

    # -- the deployment -------------------------------------------------------------------

    def env(self) -> dict:
        sentinels = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return {**isolated_env(self.workdir), "LOCKRUN_REDIS_URL": f"redis+sentinel://{sentinels}/{SERVICE}/0"}

    def _extra_args(self, inv: Invocation) -> list[str]:
        return ["--replicas", group_of(inv.name)]

    def _names_for(self, k: int) -> list[str]:
        # One name each, round robin (so every group always has contenders); a ninth goes to
        # --replicas 0, whose overlaps need a contender that starts fresh right after a failover.
        return [self.names[k % len(self.names)]]

    def run(self) -> FailoverSoak:
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        self.nodes = [Node(label, logs) for label in "abc"]
        try:
            self.nodes[0].start(None)
            for node in self.nodes[1:]:
                node.start(self.nodes[0])
            for node in self.nodes:
                self._attach_monitor(node)
            self._start_sentinels()
            self._heal(timeout=60)
            if self.unhealed:
                raise RuntimeError(f"the deployment did not come up: {self.unhealed}")
            self._contend_and_inject(self.env())
        finally:
            self._closing = True
            for proc in self._sentinels:
                proc.kill()
                proc.wait()
            for node in self.nodes:
                node.proxy.close()
                node.server.cleanup()
            for _, _, recorder in self.streams:
                recorder.stop()
            self._keep_streams()
        return self

    def _keep_streams(self) -> None:
        """Every MONITOR stream in the working directory, to read after a failure."""
        folder = self.workdir / "monitor"
        folder.mkdir(exist_ok=True)
        for epoch, label, recorder in self.streams:
            (folder / f"{epoch:03d}-{label}.log").write_text("\n".join(recorder.lines) + "\n")
        (self.workdir / "faults.log").write_text(self.fault_log() + "\n")

    def _start_sentinels(self) -> None:
        folder = self.workdir / "sentinels"
        folder.mkdir(exist_ok=True)
        master = self.nodes[0].proxy.port
        for _ in range(3):
            port = free_port()
            conf = folder / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {folder}\nlogfile {self.workdir}/logs/sentinel-{port}.log\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {master} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} 3000\n"
            )
            self._sentinels.append(subprocess.Popen(["redis-server", str(conf), "--sentinel"], cwd=folder,
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self.sentinel_ports.append(port)

    # -- MONITOR, reattached after a CLIENT KILL -------------------------------------------

    def _attach_monitor(self, node: Node) -> None:
        with self._monitor_lock:
            epoch = len(self.streams)
            recorder = MonitorRecorder(node.server.socket, epoch,
                                       on_end=lambda rec, node=node: self._monitor_cut(node, rec))
            self.streams.append((epoch, node.label, recorder))

    def _monitor_cut(self, node: Node, recorder: MonitorRecorder) -> None:
        """A failover's CLIENT KILL TYPE normal cuts MONITOR too: nobody may reach the server through
        its proxy until a new MONITOR is attached, so no script runs unseen."""
        if self._closing or not node.up or node.server.proc.poll() is not None:
            return
        node.proxy.gate(False)
        try:
            self._attach_monitor(node)
        except OSError:
            return  # the server is going down; its restart attaches a new one
        finally:
            node.proxy.gate(True)
        self.gaps.append((node.label, recorder.ended_at or time.time(), time.time()))

    # -- the Sentinels' view ----------------------------------------------------------------

    def _sentinel_reply(self, port: int, *command, default=None):
        try:
            with redis.Redis(port=port, socket_timeout=2, protocol=2) as client:
                return client.execute_command(*command)
        except redis.RedisError:
            return default

    def _named_master(self, port: int) -> Node | None:
        reply = self._sentinel_reply(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        if not reply:
            return None
        return next((node for node in self.nodes if node.proxy.port == int(reply[1])), None)

    def _master(self) -> Node | None:
        """The master the Sentinels name (the first that answers)."""
        for port in self.sentinel_ports:
            if (node := self._named_master(port)) is not None:
                return node
        return None

    def _wait_for_switch(self, old: Node, timeout: float = 30.0) -> Node | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            new = self._master()
            if new is not None and new is not old and new.role()[0] == "master":
                return new
            time.sleep(0.05)
        return None

    def _demote(self, stale: Node, master: Node) -> None:
        """What the Sentinels send a master that lost its place (``+convert-to-slave``)."""
        try:
            with stale.client() as client:
                pipe = client.pipeline(transaction=True)
                pipe.execute_command("REPLICAOF", "127.0.0.1", master.proxy.port)
                pipe.execute_command("CLIENT", "KILL", "TYPE", "normal")
                pipe.execute()
        except redis.RedisError:
            pass

    def _heal(self, timeout: float = 30.0) -> None:
        """Wait until the Sentinels agree on a master that has both others in sync as replicas;
        a stale master still claiming the role is demoted on the way."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            masters = {self._named_master(port) for port in self.sentinel_ports}
            master = masters.pop() if len(masters) == 1 else None
            if master is not None and all(node.up for node in self.nodes):
                for node in self.nodes:
                    if node is not master and node.role()[0] == "master":
                        self._demote(node, master)
                if master.role() == ("master", 2):
                    return
            time.sleep(0.1)
        self.unhealed.append(f"{time.time():.3f}: not healed within {timeout:g}s: "
                             f"{[(node.label, node.role()) for node in self.nodes]}")

    # -- faults -------------------------------------------------------------------------------

    def _after_switch(self, rng, old: Node, kind: str, started: float) -> str:
        """The promotion, then the old master demoted after a seeded 1-5 s (as the Sentinels would
        at their next INFO, up to 10 s later), then the deployment whole again."""
        new = self._wait_for_switch(old)
        if new is None:
            return f"failed: no promotion within 30 s ({kind})"
        took = time.time() - started
        self.failovers.append(f"{old.label} -> {new.label} ({kind}, {took:.1f}s)")
        time.sleep(rng.uniform(*DEMOTE_AFTER))
        self._heal()
        return f"{old.label} -> {new.label} in {took:.1f}s"

    def _fault_failover(self, rng) -> str:
        self._heal()
        old = self._master()
        started = time.time()
        if self._sentinel_reply(rng.choice(self.sentinel_ports), "SENTINEL", "FAILOVER", SERVICE) is None:
            return "failed: SENTINEL FAILOVER refused"
        return self._after_switch(rng, old, "SENTINEL FAILOVER", started)

    def _fault_lossy_failover(self, rng) -> str:
        self._heal()
        old = self._master()
        stalled = time.time()
        old.proxy.stall_replication(True)
        try:
            # Wait for a command granted while the replicas hear nothing (at most 4 s).
            granted = wait_for(lambda: self._started_since(stalled), 4.0)
            started = time.time()
            if self._sentinel_reply(rng.choice(self.sentinel_ports), "SENTINEL", "FAILOVER", SERVICE) is None:
                return "failed: SENTINEL FAILOVER refused"
            new = self._wait_for_switch(old)
        finally:
            old.proxy.stall_replication(False)
        if new is None:
            return "failed: no promotion within 30 s (lossy)"
        took = time.time() - started
        self.failovers.append(f"{old.label} -> {new.label} (lossy SENTINEL FAILOVER, {took:.1f}s)")
        time.sleep(rng.uniform(*DEMOTE_AFTER))
        self._heal()
        return f"{old.label} -> {new.label} in {took:.1f}s; {len(granted or [])} commands started during the stall"

    def _fault_master_kill(self, rng) -> str:
        self._heal()
        old = self._master()
        started = time.time()
        old.up = False
        old.proxy.gate(False)
        old.server.kill(signal.SIGKILL)
        new = self._wait_for_switch(old)
        # Back empty (no persistence), as the new master's replica: MONITOR first, then the proxy.
        old.start(new or self._master())
        self._attach_monitor(old)
        old.proxy.gate(True)
        if new is None:
            return "failed: no promotion within 30 s (SIGKILL)"
        took = time.time() - started
        self.failovers.append(f"{old.label} -> {new.label} (SIGKILL of the master, {took:.1f}s)")
        self._heal()
        return f"{old.label} -> {new.label} in {took:.1f}s"

    def _fault_master_stop(self, rng) -> str:
        self._heal()
        old = self._master()
        started = time.time()
        old.server.pause()
        try:
            new = self._wait_for_switch(old)
        finally:
            old.server.resume()
        if new is None:
            return "failed: no promotion within 30 s (SIGSTOP)"
        took = time.time() - started
        self.failovers.append(f"{old.label} -> {new.label} (SIGSTOP of the master, {took:.1f}s)")
        time.sleep(rng.uniform(*DEMOTE_AFTER))  # a stale master, back from its pause, until demoted
        self._heal()
        return f"{old.label} -> {new.label} in {took:.1f}s"

    def _fault_master_pause(self, rng) -> str:
        master = self._master()
        length = rng.uniform(0.2, 0.7)  # shorter than down-after-milliseconds: no failover
        master.server.pause()
        time.sleep(length)
        master.server.resume()
        return f"{master.label} for {length:.2f}s"

    def _fault_replica_pause(self, rng) -> str:
        master = self._master()
        replica = rng.choice([node for node in self.nodes if node is not master])
        length = rng.uniform(0.3, 3.0)
        replica.server.pause()
        time.sleep(length)
        replica.server.resume()
        return f"{replica.label} for {length:.2f}s"

    def _fault_replication_stall(self, rng) -> str:
        master = self._master()
        length = rng.uniform(0.3, 2.5)
        master.proxy.stall_replication(True)
        time.sleep(length)
        master.proxy.stall_replication(False)
        return f"{master.label} for {length:.2f}s"

    def _fault_client_kill(self, rng) -> str:
        master = self._master()
        try:
            with master.client() as client:
                # lockrun's connections: through the proxy (TCP), unnamed, plain clients; not the
                # replicas' links (flag S) nor the Sentinels' (named sentinel-...), nor MONITOR (unix)
                victims = [c["id"] for c in client.client_list() if c["addr"].startswith("127.0.0.1:")
                           and c.get("flags") == "N" and not c.get("name")]
                for victim in victims:
                    client.client_kill_filter(_id=victim)
        except redis.RedisError as exc:
            return f"failed: {exc}"
        return f"{len(victims)} connections to {master.label}"

    def _fault_steal(self, rng) -> str:
        name = rng.choice(self.names)
        key = f"lockrun:{{{name}}}:lock"
        master = self._master()
        try:
            with master.client() as client:
                if rng.random() < 0.5:
                    client.set(key, f"thief-{rng.getrandbits(32):08x}", px=rng.randint(200, 2500))
                    return f"{name} overwritten on {master.label}"
                return f"{name} deleted on {master.label} ({client.delete(key)} key)"
        except redis.RedisError as exc:
            return f"failed: {exc}"

    def _fault_proxy_drop(self, rng) -> str:
        master = self._master()
        master.proxy.drop()
        return master.label

    def _fault_proxy_delay(self, rng) -> str:
        master = self._master()
        delay, length = rng.uniform(0.05, 0.5), rng.uniform(0.5, 3.0)
        master.proxy.delay(delay)
        time.sleep(length)
        master.proxy.delay(0.0)
        return f"{master.label}: {delay * 1000:.0f} ms for {length:.2f}s"

    def _fault_proxy_blackhole(self, rng) -> str:
        master = self._master()
        length = rng.uniform(0.2, 3.0)
        master.proxy.blackhole(True)
        time.sleep(length)
        master.proxy.blackhole(False)
        return f"{master.label} for {length:.2f}s"

    def _started_since(self, since: float) -> list[Path]:
        return [path for path in (self.logdir / "holders").iterdir() if path.stat().st_mtime >= since]

    # -- verdict --------------------------------------------------------------------------

    def verdict(self) -> list[str]:
        server = reconstruct_across([(epoch, label, recorder.lines) for epoch, label, recorder in self.streams],
                                    snapshots=self._full_syncs())
        commands = self.command_logs()
        self.stale_renewals = server.stale_renewals
        labels = {epoch: label for epoch, label, _ in self.streams}
        for crossing in server.crossings:
            # a grant that counted (as many replicas as the group waits for had it: a stale master's
            # grant, which none had, gave its lock back) before the earlier lease's deadline as those
            # replicas knew it
            wanted = ACKNOWLEDGED_BY[group_of(crossing.name)]
            known = server.acknowledged_deadline(crossing.earlier, wanted)
            counted = server.acknowledged_deadline(crossing.later, wanted) is not None
            if counted and known is not None and crossing.at < known - EPSILON:
                self.crossings[group_of(crossing.name)] += 1
                self.crossing_notes.append(
                    f"{crossing.name}: {labels.get(crossing.later.epoch)} granted run {crossing.later.run_id} at "
                    f"{crossing.at:.3f}, before run {crossing.earlier.run_id}'s lease (granted by "
                    f"{labels.get(crossing.earlier.epoch)}) ended at {known:.3f} as its replicas knew it")
        ends: dict = {}
        for lease in server.leases:
            ends[lease.end] = ends.get(lease.end, 0) + 1
        self.evidence = (f"the servers granted {len(server.leases)} leases and reset them "
                         f"{sum(lease.resets for lease in server.leases)} times;"
                         f" lease ends {dict(sorted(ends.items()))}")
        problems = [*server.violations, *self._check_fencing(server.leases), *self._check_lockruns(commands),
                    *self._check_orphans(), *self.unhealed]
        for group in GROUPS:
            mine = [cmd for cmd in commands if group_of(cmd.name) == group]
            # Each lease's deadline as the replicas this group waits for knew it: the deadline
            # lockrun promises to keep (without --replicas: the master's own).
            leases, unacknowledged = {}, []
            for run_id, lease in server.by_run_id().items():
                known = server.acknowledged_deadline(lease, ACKNOWLEDGED_BY[group])
                if known is not None:
                    leases[run_id] = dataclasses.replace(lease, last_reset=known - lease.ttl)
                else:
                    unacknowledged.append(run_id)
            pairs = self._overlapping(leases, mine)
            explained = [pair for pair in pairs if self._after_live_failover(*pair)]
            self.overlaps[group], self.after_live_failover[group] = len(pairs), len(explained)
            wanted = ACKNOWLEDGED_BY[group] if ACKNOWLEDGED_BY[group] is not None else "the WAITed-for"
            found = [f"run {cmd.run_id} ({cmd.name}) ran a command under a lease that fewer than {wanted} replicas"
                     " ever had" for cmd in mine if cmd.run_id in unacknowledged]
            found += [*self._check_commands(leases, [cmd for cmd in mine if cmd.run_id not in unacknowledged]),
                      *(self._describe(leases, *pair) for pair in pairs)]
            if group == "0":
                self.broken[group] = found  # what a failover does without --replicas: counted, not failed on
            elif group == "1":
                self.broken[group] = found
                problems += [f"--replicas 1: {self._describe(leases, *pair)}, and no failover with the old master up"
                             " explains it" for pair in pairs if pair not in explained]
            else:
                problems += [f"--replicas {group}: {problem}" for problem in found]
        return problems

    def _full_syncs(self) -> list[tuple[float, str, str]]:
        """(when, replica, master) of every full resynchronisation, from the masters' logs: what a
        replica gets in a snapshot never shows in its MONITOR stream. ``when`` is the fork of the
        snapshot (``Starting BGSAVE for SYNC`` after the replica's request; replicas announce
        their proxy's port)."""
        by_proxy = {node.proxy.port: node.label for node in self.nodes}
        syncs = []
        for node in self.nodes:
            log = node.logs / f"redis-{node.label}.log"
            waiting: list[str] = []  # replicas whose full resync waits for the next snapshot
            for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
                asking = re.search(r"Replica 127\.0\.0\.1:(\d+) asks for synchronization", line)
                partial = re.search(r"Partial resynchronization request from 127\.0\.0\.1:(\d+) accepted", line)
                if asking and by_proxy.get(int(asking.group(1))):
                    waiting.append(by_proxy[int(asking.group(1))])
                elif partial and by_proxy.get(int(partial.group(1))) in waiting:
                    waiting.remove(by_proxy[int(partial.group(1))])
                elif "Starting BGSAVE for SYNC" in line and waiting:
                    forked = datetime.strptime(" ".join(line.split()[1:5]), "%d %b %Y %H:%M:%S.%f").timestamp()
                    syncs += [(forked, replica, node.label) for replica in waiting]
                    waiting = []
        return syncs

    def _overlapping(self, leases: dict, commands: list[CommandLog]) -> list[tuple[CommandLog, CommandLog]]:
        """Pairs of commands of one name that ran at once, unless a thief ended the first one's lease."""
        pairs = []
        runs = sorted(commands, key=lambda cmd: cmd.started)
        for i, first in enumerate(runs):
            for second in runs[i + 1:]:
                lease = leases.get(first.run_id)
                if second.name == first.name and second.started < first.last_seen and \
                        not (lease is not None and lease.end == "stolen"):
                    pairs.append((first, second))
        return pairs

    def _after_live_failover(self, first: CommandLog, second: CommandLog) -> bool:
        """The Sentinels switched masters, without the old one being SIGKILLed (SENTINEL FAILOVER, a
        partition, a stopped master), before ``second`` started and at most STALE_FOR before ``first``."""
        killed = [(fault.started, fault.ended) for fault in self.faults if fault.kind == "master-kill"]
        return any(first.started - STALE_FOR <= at <= second.started for at in self._switches()
                   if not any(start <= at <= end for start, end in killed))

    def _switches(self) -> list[float]:
        """When the Sentinels switched masters (``+switch-master`` in their logs; each one logs it)."""
        if self._switch_times is None:
            self._switch_times = []
            for log in self.workdir.glob("logs/sentinel-*.log"):
                for line in log.read_text(errors="replace").splitlines():
                    if "+switch-master" in line:
                        self._switch_times.append(
                            datetime.strptime(" ".join(line.split()[1:5]), "%d %b %Y %H:%M:%S.%f").timestamp())
        return self._switch_times

    @staticmethod
    def _describe(leases: dict, first: CommandLog, second: CommandLog) -> str:
        lease = leases.get(first.run_id)
        return (f"{first.name}: runs {first.run_id} and {second.run_id} overlapped for "
                f"{first.last_seen - second.started:.3f}s (first lease ended: {lease.end if lease else 'unknown'})")

    def summary(self) -> str:
        codes: dict[str, dict] = {group: {} for group in GROUPS}
        for inv in self.invocations:
            counts = codes[group_of(inv.name)]
            counts[inv.rc] = counts.get(inv.rc, 0) + 1
        kinds: dict = {}
        for fault in self.faults:
            kinds[fault.kind] = kinds.get(fault.kind, 0) + 1
        per_group = "; ".join(
            f"--replicas {group}: {self.overlaps[group]} overlaps ({self.after_live_failover[group]} after a failover "
            f"with the old master up), {self.crossings[group]} grants over a valid lease, exit codes "
            f"{dict(sorted(codes[group].items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))}"
            for group in GROUPS
        )
        return (
            f"seed {self.seed}, {self.duration:g}s, {self.contenders} contenders on {len(self.names)} names "
            f"(--replicas {', '.join(GROUPS)}): {len(self.invocations)} lockrun runs, {len(self.command_logs())} "
            f"commands ran; {len(self.failovers)} failovers; {len(self.faults)} faults {dict(sorted(kinds.items()))}; "
            f"{self.evidence}; {self.stale_renewals} renewals on a stale master; {len(self.gaps)} MONITOR "
            f"reattachments; {per_group}"
        )


def wait_for(predicate, timeout: float):
    """``predicate()``'s first truthy value within ``timeout``, else None (no failure: a fault goes on)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.02)
    return None


def run_failover_soak(seed: int, duration: float, workdir: Path, **options) -> tuple[FailoverSoak, list[str]]:
    soak = FailoverSoak(seed, duration, Path(workdir), **options).run()
    return soak, soak.verdict()

