"""The fault soak: many lockrun processes, a few names, a seeded storm of faults, then a verdict.

Layout of one soak:

* one real ``redis-server`` (unix socket for the harness, TCP port behind a
  :class:`~tests.soak.proxy.FaultyProxy` for every lockrun process);
* a MONITOR connection per server lifetime: the server's own account of every
  lease (:mod:`tests.soak.oracle`);
* ``contenders`` threads, each running ``lockrun -n NAME --ttl T [--wait W] -- soak
  command`` in a loop; the command logs its start (fencing token, run id), a
  tick every 20 ms and its end;
* one fault injector, driven by ``random.Random(seed)``: first every kind of fault
  once, in a seeded order, then a seeded mix.

Then :meth:`Soak.verdict` checks the promises (see ``INVARIANTS``). The schedule is
replayable from the seed (the choices, not the exact timing, which no soak can
promise): ``python -m tests.soak --seed N``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import redis

from tests.conftest import RedisServer, history, isolated_env, lockrun_argv, pid_alive
from tests.soak.daemons import DAEMONIZE, check_daemons
from tests.soak.oracle import MonitorRecorder, ServerLease, reconstruct
from tests.soak.proxy import FaultyProxy

INVARIANTS = """\
1. the server never grants a name while another lease of it is valid, and only the owner extends or releases it;
2. every command ran inside a lease the server granted to its run, and stopped before that lease's deadline
   (its last server-side reset + TTL), even when its lockrun was SIGSTOPped; a SIGKILLed holder's command
   dies promptly with it;
3. two commands of one name overlap only when the earlier lease was ended by a fault (stolen key, server
   death): never while both leases could have been valid;
4. fencing tokens strictly increase in grant order across every server lifetime (a restart without persistence
   included), and each command saw its own;
5. every lockrun process has exactly one ledger row, in a final status that matches its exit code
   (abandoned for the SIGKILLed ones), and no lockrun printed a traceback or hung;
6. no command process outlives the soak;
7. the fleet record: every run whose release script reached the server has exactly one end event in that
   server lifetime's record, with the status and fencing token of its (final) ledger row; no run has two;
8. a daemon a command left behind (setsid, a double fork) is gone before its run released the lock, or
   before the lease's deadline, or promptly after its lockrun was SIGKILLed (tests/soak/daemons.py).
"""

PY = sys.executable

# The command under lockrun: logs start (with what lockrun gave it), ticks, end; with a third
# argument "daemon", it first leaves a daemon behind (tests/soak/daemons.py).
COMMAND = r"""
import os, sys, time
logdir, work = sys.argv[1], float(sys.argv[2])
run_id = os.environ["LOCKRUN_RUN_ID"]
with open(os.path.join(logdir, "holders", str(os.getppid())), "w") as marker:
    marker.write(run_id)
fail_first = os.environ.get("SOAK_FAIL_FIRST")  # --retry: the first attempt fails, the next succeeds
if fail_first and not os.path.exists(fail_first):
    with open(fail_first, "w"), open(os.path.join(logdir, run_id + ".log"), "a") as log:
        log.write(f"start {time.time()!r} {os.getpid()} {os.getppid()} {os.environ['LOCKRUN_FENCING_TOKEN']} "
                  f"{os.environ['LOCKRUN_NAME']} {run_id}\n")
    sys.exit(3)
""" + DAEMONIZE + r"""
with open(os.path.join(logdir, run_id + ".log"), "a", buffering=1) as log:
    log.write(f"start {time.time()!r} {os.getpid()} {os.getppid()} {os.environ['LOCKRUN_FENCING_TOKEN']} "
              f"{os.environ['LOCKRUN_NAME']} {run_id}\n")
    end = time.monotonic() + work
    while time.monotonic() < end:
        log.write(f"tick {time.time()!r}\n")
        time.sleep(0.02)
    log.write(f"end {time.time()!r}\n")
"""

FAULTS = {  # kind: weight in the random part of the schedule
    "redis-kill": 1.0,        # SIGKILL, down for a while, back empty
    "redis-restart": 1.0,     # SIGTERM, back empty at once
    "redis-pause": 1.5,       # SIGSTOP ... SIGCONT
    "client-kill": 1.5,       # CLIENT KILL every lockrun connection
    "steal": 2.0,             # the lock key deleted, or overwritten by a thief with its own TTL
    "holder-kill": 2.0,       # SIGKILL a lockrun whose command is running
    "holder-pause": 2.0,      # SIGSTOP ... SIGCONT a lockrun whose command is running
    "proxy-drop": 1.5,        # every connection reset
    "proxy-delay": 1.5,       # every byte late
    "proxy-blackhole": 1.5,   # every byte lost, then the connections reset
}

#: How soon a command must be gone once its lockrun is SIGKILLed.
PROMPT = 1.5
#: Exit code -> the ledger status it must come with.
EXPECTED_STATUS = {0: "succeeded", 69: "unavailable", 75: "busy", 76: "lost", -9: "abandoned"}
#: The statuses an attempt of a --retry run may end in when another attempt follows it.
RETRIED_STATUSES = ("failed", "timeout", "killed")
#: The share of invocations run with --retry 1 (their first attempt fails: SOAK_FAIL_FIRST) and
#: with --jitter (docs/operating.md "Retries and jitter").
RETRY_SHARE, JITTER_SHARE = 0.25, 0.15


@dataclass
class Invocation:
    name: str
    ttl: int
    work: float
    wait: float | None
    started: float = 0.0
    ended: float | None = None
    pid: int = 0
    rc: int | None = None
    stderr: str = ""
    killed_at: float | None = None
    pauses: list[tuple[float, float]] = field(default_factory=list)
    daemon: bool = False  # its command leaves a daemon behind
    retry: bool = False  # --retry 1, and its first attempt fails


@dataclass
class CommandLog:
    run_id: str
    name: str
    fencing_token: int
    pid: int
    ppid: int
    started: float
    last_seen: float
    finished: bool


@dataclass
class Fault:
    kind: str
    started: float
    ended: float
    detail: str = ""


class Soak:
    #: kind -> weight of the faults this soak injects (first each once, then at random)
    FAULT_WEIGHTS = FAULTS
    #: seconds between two faults, drawn uniformly
    FAULT_GAP = (0.3, 1.2)
    #: the share of commands that leave a daemon behind (invariant 8)
    DAEMON_SHARE = 0.5

    def __init__(self, seed: int, duration: float, workdir: Path, contenders: int = 6, names: int = 3,
                 ttls: tuple[int, ...] = (1, 2, 3)) -> None:
        self.seed = seed
        self.duration = duration
        self.workdir = Path(workdir)
        self.contenders = contenders
        self.names = [f"job{i}" for i in range(names)]
        self.ttls = ttls
        self.logdir = self.workdir / "commands"
        (self.logdir / "holders").mkdir(parents=True, exist_ok=True)
        self.command = self.workdir / "soak_command.py"
        self.command.write_text(COMMAND)
        self.invocations: list[Invocation] = []
        self.faults: list[Fault] = []
        self.epochs: list[tuple[int, MonitorRecorder, float | None]] = []
        self.hung: list[Invocation] = []
        self.history: list[dict] = []  # the ledger, as `lockrun history --json` shows it
        self.evidence = "not checked yet"
        self.excused_overlaps = 0
        self.fleet_ends_checked = 0  # runs whose fleet end event matched their ledger row
        self.daemons_checked = 0  # daemons whose death was checked against their run's lease
        self.excused_daemons = 0  # ... of SIGKILLed lockruns on a host without a cgroup for them
        self._live: dict[int, Invocation] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.redis: RedisServer | None = None
        self.proxy: FaultyProxy | None = None

    # -- running ----------------------------------------------------------------------

    def env(self) -> dict:
        """lockrun's settings: this soak's own state dir and ledger, Redis through the proxy."""
        return {**isolated_env(self.workdir), "LOCKRUN_REDIS_URL": f"redis://127.0.0.1:{self.proxy.port}/0"}

    def run(self) -> Soak:
        self.redis = RedisServer().start()
        try:
            self.proxy = FaultyProxy(self.redis.port).start()
            self._attach_monitor()
            self._contend_and_inject(self.env())
        finally:
            if self.proxy:
                self.proxy.close()
            self.redis.cleanup()  # ends the last MONITOR stream: every line of it is read
            for _, recorder, _ in self.epochs:
                recorder.stop()
        return self

    def _contend_and_inject(self, env: dict) -> None:
        """Contenders and the injector until the duration is over; then every lockrun must end."""
        threads = [threading.Thread(target=self._contend, args=(k, env), daemon=True)
                   for k in range(self.contenders)]
        injector = threading.Thread(target=self._inject, daemon=True)
        for thread in [*threads, injector]:
            thread.start()
        self._stop.wait(self.duration)
        self._stop.set()
        injector.join(120)  # a fault in progress finishes first (a failover soak's take a while)
        # Every lockrun must end on its own: the longest wait + work + TTL, and then some.
        deadline = time.monotonic() + 60
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            self.hung = list(self._live.values())
        for inv in self.hung:
            _signal(inv.pid, signal.SIGKILL)
        for thread in threads:
            thread.join(10)
        self.history = history(env, limit=1_000_000)

    def _attach_monitor(self) -> None:
        self.epochs.append((len(self.epochs), MonitorRecorder(self.redis.socket, len(self.epochs)), None))

    def _contend(self, k: int, env: dict) -> None:
        rng = random.Random(f"{self.seed}/contender/{k}")
        daemons = random.Random(f"{self.seed}/daemons/{k}")
        retries = random.Random(f"{self.seed}/retries/{k}")  # its own stream: the others' choices stay as they were
        names = self._names_for(k)
        while not self._stop.is_set():
            ttl = rng.choice(self.ttls)
            wait = rng.uniform(0.5, 6.0) if rng.random() < 0.5 else None
            inv = Invocation(rng.choice(names), ttl, rng.uniform(0.05, 2.5 * ttl), wait,
                             daemon=daemons.random() < self.DAEMON_SHARE)
            argv = ["-n", inv.name, "--ttl", str(ttl), *self._extra_args(inv)]
            if wait is not None:
                argv += ["--wait", f"{wait:.1f}"]
            run_env = env
            inv.retry = retries.random() < RETRY_SHARE
            if inv.retry:
                argv += ["--retry", "1", "--retry-delay", f"{retries.uniform(0.0, 0.5):.2f}"]
                run_env = {**env, "SOAK_FAIL_FIRST": str(self.logdir / f"fail-{k}-{len(self.invocations)}")}
            if retries.random() < JITTER_SHARE:
                argv += ["--jitter", f"{retries.uniform(0.05, 0.5):.2f}"]
            argv += ["--", PY, str(self.command), str(self.logdir), f"{inv.work:.3f}", *(["daemon"] * inv.daemon)]
            inv.started = time.time()
            proc = subprocess.Popen(lockrun_argv(*argv), env=run_env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            inv.pid = proc.pid
            with self._lock:
                self.invocations.append(inv)
                self._live[proc.pid] = inv
            _, inv.stderr = proc.communicate()
            inv.rc, inv.ended = proc.returncode, time.time()
            with self._lock:
                self._live.pop(proc.pid, None)
            self._stop.wait(rng.uniform(0.0, 0.3))

    def _names_for(self, k: int) -> list[str]:
        """The names contender ``k`` picks from (a sibling soak's business)."""
        return self.names

    def _extra_args(self, inv: Invocation) -> list[str]:
        """More lockrun options for one invocation (a sibling soak's business)."""
        return []

    # -- faults -----------------------------------------------------------------------

    def _inject(self) -> None:
        rng = random.Random(f"{self.seed}/faults")
        first = list(self.FAULT_WEIGHTS)
        rng.shuffle(first)
        kinds, weights = list(self.FAULT_WEIGHTS), list(self.FAULT_WEIGHTS.values())
        while not self._stop.wait(rng.uniform(*self.FAULT_GAP)):
            in_first_round = bool(first)
            kind = first.pop(0) if first else rng.choices(kinds, weights)[0]
            started = time.time()
            detail = getattr(self, "_fault_" + kind.replace("-", "_"))(rng) or ""
            self.faults.append(Fault(kind, started, time.time(), detail))
            if in_first_round and detail.startswith(("no holder", "failed")):
                first.append(kind)  # every kind must really happen once: try it again later

    def _server_down(self, sig: int) -> str:
        self.proxy.gate(False)  # nobody reaches the next server before its MONITOR is attached
        self.redis.kill(sig)
        died = time.time()
        epoch, recorder, _ = self.epochs[-1]
        recorder.stop()
        self.epochs[-1] = (epoch, recorder, died)
        return f"epoch {epoch} ended"

    def _server_up(self) -> None:
        self.redis.start()
        self._attach_monitor()
        self.proxy.gate(True)

    def _fault_redis_kill(self, rng) -> str:
        down = rng.uniform(0.2, 2.0)
        detail = self._server_down(signal.SIGKILL)
        time.sleep(down)
        self._server_up()
        return f"{detail}; down {down:.2f}s"

    def _fault_redis_restart(self, rng) -> str:
        detail = self._server_down(signal.SIGTERM)
        self._server_up()
        return detail

    def _fault_redis_pause(self, rng) -> str:
        length = rng.uniform(0.2, 3.0)
        self.redis.pause()
        time.sleep(length)
        self.redis.resume()
        return f"{length:.2f}s"

    def _fault_client_kill(self, rng) -> str:
        client = self.redis.client()
        try:
            # lockrun comes in over TCP (through the proxy); the harness and MONITOR over the socket
            victims = [c["id"] for c in client.client_list() if c["addr"].startswith("127.0.0.1:")]
            for victim in victims:
                client.client_kill_filter(_id=victim)
        except redis.RedisError as exc:
            return f"failed: {exc}"
        finally:
            client.close()
        return f"{len(victims)} connections"

    def _fault_steal(self, rng) -> str:
        name = rng.choice(self.names)
        key = f"lockrun:{{{name}}}:lock"
        thief_ms = rng.randint(200, 2500)
        overwrite = rng.random() < 0.5
        client = self.redis.client()
        try:
            if overwrite:
                client.set(key, f"thief-{rng.getrandbits(32):08x}", px=thief_ms)
                return f"{name} overwritten for {thief_ms} ms"
            return f"{name} deleted ({client.delete(key)} key)"
        except redis.RedisError as exc:
            return f"failed: {exc}"
        finally:
            client.close()

    def _holders(self) -> list[Invocation]:
        """lockrun processes whose command is running; waits a little for one to appear."""
        deadline = time.monotonic() + 5
        while not (holders := self._current_holders()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return holders

    def _current_holders(self) -> list[Invocation]:
        with self._lock:
            live = list(self._live.values())
        holders = []
        for inv in live:
            marker = self.logdir / "holders" / str(inv.pid)
            try:
                if marker.stat().st_mtime >= inv.started - 0.01 and inv.killed_at is None:
                    holders.append(inv)
            except FileNotFoundError:
                pass
        return holders

    def _fault_holder_kill(self, rng) -> str:
        holders = self._holders()
        if not holders:
            return "no holder"
        victim = rng.choice(holders)
        victim.killed_at = time.time()
        _signal(victim.pid, signal.SIGKILL)
        return f"pid {victim.pid} ({victim.name})"

    def _fault_holder_pause(self, rng) -> str:
        length = rng.uniform(0.2, 4.0)
        holders = self._holders()
        if not holders:
            return "no holder"
        victim = rng.choice(holders)
        stopped = time.time()
        _signal(victim.pid, signal.SIGSTOP)
        time.sleep(length)
        _signal(victim.pid, signal.SIGCONT)
        victim.pauses.append((stopped, time.time()))
        return f"pid {victim.pid} ({victim.name}) for {length:.2f}s"

    def _fault_proxy_drop(self, rng) -> str:
        self.proxy.drop()
        return ""

    def _fault_proxy_delay(self, rng) -> str:
        delay, length = rng.uniform(0.05, 1.0), rng.uniform(0.5, 3.0)
        self.proxy.delay(delay)
        time.sleep(length)
        self.proxy.delay(0.0)
        return f"{delay * 1000:.0f} ms for {length:.2f}s"

    def _fault_proxy_blackhole(self, rng) -> str:
        length = rng.uniform(0.2, 3.0)
        self.proxy.blackhole(True)
        time.sleep(length)
        self.proxy.blackhole(False)
        return f"{length:.2f}s"

    # -- evidence ---------------------------------------------------------------------

    def command_logs(self) -> list[CommandLog]:
        logs = []
        for path in sorted(self.logdir.glob("*.log")):
            lines = path.read_text().splitlines()
            if not lines or not lines[0].startswith("start "):
                continue
            _, at, pid, ppid, fence, name, run_id = lines[0].split()
            times = [float(line.split()[1]) for line in lines if len(line.split()) == 2]
            logs.append(CommandLog(run_id, name, int(fence), int(pid), int(ppid), float(at),
                                   max([float(at), *times]), lines[-1].startswith("end ")))
        return logs

    # -- verdict ----------------------------------------------------------------------

    def verdict(self) -> list[str]:
        """Every broken promise (``INVARIANTS``), one line each; empty when the soak passed."""
        server = reconstruct([(epoch, rec.lines, died) for epoch, rec, died in self.epochs])
        leases = server.by_run_id()
        commands = self.command_logs()
        ends: dict = {}
        for lease in server.leases:
            ends[lease.end] = ends.get(lease.end, 0) + 1
        self.evidence = (f"the server granted {len(server.leases)} leases and reset them "
                         f"{sum(lease.resets for lease in server.leases)} times; lease ends "
                         f"{dict(sorted(ends.items()))}")
        return [
            *server.violations,  # 1
            *self._check_commands(leases, commands),  # 2
            *self._check_overlaps(leases, commands),  # 3
            *self._check_fencing(server.leases),  # 4
            *self._check_lockruns(commands),  # 5
            *self._check_orphans(),  # 6
            *self._check_fleet_record(server),  # 7
            *check_daemons(self, leases, PROMPT),  # 8
        ]

    def _invocation_of(self, pid: int, at: float) -> Invocation | None:
        """The lockrun process that had ``pid`` at time ``at`` (pids are reused in a long soak)."""
        for inv in self.invocations:
            if inv.pid == pid and inv.started - 0.01 <= at <= (inv.ended or float("inf")) + 0.01:
                return inv
        return None

    def _check_commands(self, leases: dict[str, ServerLease], commands: list[CommandLog]) -> list[str]:
        problems = []
        for cmd in commands:
            lease = leases.get(cmd.run_id)
            if lease is None:
                problems.append(f"run {cmd.run_id} ({cmd.name}) ran a command, but the server never granted it a lease")
                continue
            if cmd.started < lease.acquired_at:
                problems.append(f"run {cmd.run_id} started its command before the server granted the lease")
            if cmd.fencing_token != lease.fencing_token:
                problems.append(f"run {cmd.run_id} saw fencing token {cmd.fencing_token}, "
                                f"the server gave {lease.fencing_token}")
            inv = self._invocation_of(cmd.ppid, cmd.started)
            if cmd.last_seen > lease.deadline:
                paused = " (its lockrun was SIGSTOPped)" if inv and inv.pauses else ""
                problems.append(
                    f"run {cmd.run_id} ({cmd.name}) was still running {cmd.last_seen - lease.deadline:.3f}s after"
                    f" its lease's deadline{paused} (lease end: {lease.end}, {lease.resets} resets, ttl {lease.ttl:g}s)"
                )
            if inv is not None and inv.killed_at is not None and cmd.last_seen > inv.killed_at + PROMPT:
                problems.append(f"run {cmd.run_id} ({cmd.name}) was still running "
                                f"{cmd.last_seen - inv.killed_at:.3f}s after its lockrun was SIGKILLed")
        return problems

    def _check_overlaps(self, leases: dict[str, ServerLease], commands: list[CommandLog]) -> list[str]:
        problems = []
        for name in self.names:
            runs = sorted((cmd for cmd in commands if cmd.name == name), key=lambda cmd: cmd.started)
            for i, first in enumerate(runs):
                for second in runs[i + 1:]:
                    if second.started >= first.last_seen:
                        continue
                    lease = leases.get(first.run_id)
                    if lease is not None and lease.end in ("stolen", "died"):
                        self.excused_overlaps += 1
                    else:
                        problems.append(
                            f"{name}: runs {first.run_id} and {second.run_id} overlapped for "
                            f"{first.last_seen - second.started:.3f}s (first lease ended: "
                            f"{lease.end if lease else 'unknown'})"
                        )
        return problems

    @staticmethod
    def _check_fencing(leases: list[ServerLease]) -> list[str]:
        """Tokens strictly increase in grant order, across every Redis lifetime (the server's own
        MONITOR timestamps order the grants; every server of a soak runs on this host's clock)."""
        problems = []
        grants: dict[str, list[ServerLease]] = {}
        for lease in leases:
            grants.setdefault(lease.name, []).append(lease)
        for name, granted in grants.items():
            ordered = sorted(granted, key=lambda lease: lease.acquired_at)
            for before, after in itertools.pairwise(ordered):
                if after.fencing_token is None or before.fencing_token is None or \
                        after.fencing_token <= before.fencing_token:
                    problems.append(
                        f"{name}: fencing token {after.fencing_token} (Redis lifetime {after.epoch}, run "
                        f"{after.run_id}) granted after {before.fencing_token} (lifetime {before.epoch}, run "
                        f"{before.run_id}): tokens must strictly increase across every lifetime"
                    )
        return problems

    def _check_lockruns(self, commands: list[CommandLog]) -> list[str]:
        problems = [f"lockrun pid {inv.pid} ({inv.name}) did not finish within 60 s of the soak's end"
                    for inv in self.hung]
        rows_by_pid: dict[int, list[dict]] = {}
        for row in self.history:
            rows_by_pid.setdefault(row["pid"], []).append(row)
        commands_by_run = {cmd.run_id: cmd for cmd in commands}
        for inv in self.invocations:
            if inv in self.hung:
                continue
            if "Traceback" in inv.stderr:
                problems.append(f"lockrun pid {inv.pid} printed a traceback:\n{inv.stderr}")
            if inv.rc == -9 and inv.killed_at is None and not inv.pauses:
                # (a SIGSTOPped holder is SIGKILLed by its own backstop timer when its lease runs out)
                problems.append(f"lockrun pid {inv.pid} died of SIGKILL nobody sent")
            expected = EXPECTED_STATUS.get(inv.rc)
            if expected is None:
                problems.append(f"lockrun pid {inv.pid} exited {inv.rc}: {inv.stderr.strip()}")
                continue
            rows = [row for row in rows_by_pid.get(inv.pid, [])
                    if inv.started - 1 <= _epoch_seconds(row["started_at"]) <= inv.ended + 1]
            attempts = sorted(rows, key=lambda row: row.get("attempt") or 0)
            if inv.retry and rows and [row.get("attempt") for row in attempts] == list(range(1, len(rows) + 1)):
                # --retry: one row per attempt, all naming the first; only the last is the run's outcome
                problems += self._check_attempts(inv, attempts)
                rows = attempts[-1:]
            if len(rows) != 1:
                problems.append(f"lockrun pid {inv.pid} (exit {inv.rc}) has {len(rows)} ledger rows")
                continue
            row = rows[0]
            final_before_kill = (inv.rc == -9 and inv.killed_at is not None and row["ended_at"]
                                 and _epoch_seconds(row["ended_at"]) <= inv.killed_at)
            if row["status"] != expected and not final_before_kill:
                problems.append(f"lockrun pid {inv.pid} exited {inv.rc} but its ledger row says {row['status']!r}"
                                f" ({row.get('error') or ''})")
            cmd = commands_by_run.get(row["run_id"])
            if inv.rc == 0 and (cmd is None or not cmd.finished):
                problems.append(f"run {row['run_id']} exited 0 without its command finishing")
            if cmd is not None and row["fencing_token"] != cmd.fencing_token:
                problems.append(f"run {row['run_id']}: ledger fencing token {row['fencing_token']}, "
                                f"command saw {cmd.fencing_token}")
        return problems

    @staticmethod
    def _check_attempts(inv: Invocation, attempts: list[dict]) -> list[str]:
        """The rows of one --retry 1 run: at most two attempts, both naming the first's run id, the
        earlier one ended in a status that is retried."""
        problems = []
        if len(attempts) > 2:
            problems.append(f"lockrun pid {inv.pid} (--retry 1) has {len(attempts)} attempts")
        first = attempts[0]["run_id"]
        for row in attempts:
            if row.get("first_run_id") != first:
                problems.append(f"run {row['run_id']} (attempt {row.get('attempt')}) names first run "
                                f"{row.get('first_run_id')}, not {first}")
        for row in attempts[:-1]:
            if row["status"] not in RETRIED_STATUSES:
                problems.append(f"run {row['run_id']} (attempt {row.get('attempt')}) ended {row['status']!r},"
                                " and yet another attempt followed")
        return problems

    def _check_fleet_record(self, server) -> list[str]:
        problems = []
        ends: dict[tuple[int, str], list[dict]] = {}
        for event in server.fleet_events:
            if event.kind == "end":
                ends.setdefault((event.epoch, event.fields.get("run_id", "")), []).append(event.fields)
        for (epoch, run_id), found in ends.items():
            if len(found) > 1:
                problems.append(f"run {run_id} has {len(found)} end events in Redis lifetime {epoch}'s fleet record")
        final = {row["run_id"]: row for row in self.history if row["status"] not in ("running", "abandoned")}
        for run_id, epochs in server.releases.items():
            row = final.get(run_id)
            for epoch in sorted(set(epochs)):
                found = ends.get((epoch, run_id), [])
                if len(found) != 1:
                    problems.append(f"run {run_id}: its release ran in Redis lifetime {epoch}, which recorded "
                                    f"{len(found)} end events for it")
                    continue
                if row is None:
                    continue
                self.fleet_ends_checked += 1
                end = found[0]
                if end.get("status") != row["status"] or end.get("fencing_token") != str(row["fencing_token"]):
                    problems.append(f"run {run_id}: fleet end event says {end.get('status')}/fence "
                                    f"{end.get('fencing_token')}, its ledger row {row['status']}/fence "
                                    f"{row['fencing_token']}")
        return problems

    def _check_orphans(self) -> list[str]:
        # Every lockrun has exited by now, and it waits for its command's group (or, killed, its
        # watchdog kills the group at once): anything left naming the soak's directory is an orphan.
        deadline = time.monotonic() + 5
        while (orphans := _processes_mentioning(str(self.logdir))) and time.monotonic() < deadline:
            time.sleep(0.1)
        return [f"orphan command process {pid} outlived its lockrun and the soak" for pid in orphans]

    def summary(self) -> str:
        codes: dict = {}
        for inv in self.invocations:
            codes[inv.rc] = codes.get(inv.rc, 0) + 1
        kinds: dict = {}
        for fault in self.faults:
            kinds[fault.kind] = kinds.get(fault.kind, 0) + 1
        commands = self.command_logs()
        return (
            f"seed {self.seed}, {self.duration:g}s, {self.contenders} contenders on {len(self.names)} names: "
            f"{len(self.invocations)} lockrun runs, {len(commands)} commands ran, exit codes "
            f"{dict(sorted(codes.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))}; "
            f"{len(self.faults)} faults {dict(sorted(kinds.items()))}; {len(self.epochs)} Redis lifetimes; "
            f"{self.evidence}; {self.excused_overlaps} overlaps after a stolen key or a Redis death; "
            f"{self.fleet_ends_checked} fleet end events matched their ledger rows; {self.daemons_checked} daemons "
            f"checked ({self.excused_daemons} of SIGKILLed lockruns excused: no cgroup)"
        )

    def fault_log(self) -> str:
        return "\n".join(f"  {f.started:.3f} +{f.ended - f.started:.2f}s {f.kind} {f.detail}" for f in self.faults)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _epoch_seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() in f.read() and pid_alive(int(entry)):
                    found.append(int(entry))
        except OSError:
            pass
    return found


def run_soak(seed: int, duration: float, workdir: Path | None = None, **options) -> tuple[Soak, list[str]]:
    workdir = Path(workdir or tempfile.mkdtemp(prefix="lockrun-soak-"))
    soak = Soak(seed, duration, workdir, **options).run()
    return soak, soak.verdict()
