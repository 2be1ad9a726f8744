"""One ``lockrun run``, start to finish.

    ledger row "running" -> acquire (or wait) -> spawn -> keeper renews
      -> wait for: child exit | lease lost | --timeout | kill due
      -> stop keeper -> release (compare-and-delete, wake a waiter) -> ledger row final

The order matters: the ledger row exists before anything can fail quietly, and
the lock is released only after the command's whole process group is gone.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from typing import Callable, NamedTuple

from lockrun import host
from lockrun.backends import Backend, Duplicate, FleetRecord, Holder, Lease, OnceKey, call_timeout_for
from lockrun.backends.redis_url import environment_for_command
from lockrun.errors import BackendUnavailable, CommandNotRunnable, ExitCode, LedgerError, LockrunError
from lockrun.clock import human_duration, iso_ago, seconds_since, utc_now_iso
from lockrun.backstop import Backstop
from lockrun.keeper import Keeper, backstop_for
from lockrun.ledger import FINAL_FIELDS, Ledger, RunRecord
from lockrun.record import Status
from lockrun.supervisor import ChildExit, Supervisor, check_runnable

#: report(level, message) with level "info" (only with -v), "warn" or "error".
Report = Callable[[str, str], None]

RELEASE_ATTEMPTS = 3
HOLDER_FIELDS_FOR_PAYLOAD = ("host", "pid", "run_id", "command", "started_at", "heartbeat_at", "ttl_remaining_s")


class RunOptions(NamedTuple):
    argv: list[str]
    name: str
    ttl: float
    wait: float | None = 0.0  # None with --replace: the holder's TTL + --kill-after
    timeout: float | None = None
    kill_after: float = 10.0
    on_lost: str = "terminate"  # or "continue"
    busy_exit_code: int = ExitCode.BUSY
    once_key: str | None = None  # already strftime-expanded
    remember: float = 30 * 86400.0
    capture_tail: int | None = None  # bytes of combined output to keep; None: stdio inherited
    notify_urls: tuple[str, ...] = ()
    notify_on: tuple[str, ...] = ()
    notify_slack: bool = False
    ping_url: str | None = None
    ping_on_busy: bool = False
    min_hold: float | None = None  # keep the lock taken this long after acquiring it, at least
    replace: bool = False  # ask a busy lock's holder to stop instead of skipping
    slots: int = 1  # up to this many holders of the name at once
    call_timeout: float | None = None  # the bound on one backend call; None: derived from the TTL


class Outcome(NamedTuple):
    exit_code: int
    status: Status
    command_exit: int | None = None
    signal: int | None = None
    fencing_token: int | None = None
    error: str | None = None
    note: str | None = None
    holder: Holder | None = None  # who kept us out, for a busy outcome
    output_tail: str | None = None


def busy_message(holder: Holder, backend: str | None = None) -> str:
    """The line operators ask for on a skip: who, for how long, until when, how to clear it;
    ``backend`` (for -v) says where the lock lives, since `lockrun status` must look there too."""
    age = human_duration(seconds_since(holder.started_at))
    run = f", run {holder.run_id[:8]}" if holder.run_id else ""
    busy = f"lock {holder.name!r} is busy" + (f" ({backend})" if backend else "")
    who = f"{busy}: held by {holder.host or '?'}:{holder.pid or '?'} for {age}{run}"
    if holder.slotted:
        who = f"{busy}: every --slots slot is taken, e.g. by {holder.host or '?'}:" \
              f"{holder.pid or '?'} for {age}{run}"
    if holder.problem:
        force = "" if holder.foreign else "--force "
        return (
            f"lock {holder.name!r} is busy, and what holds it is malformed ({holder.problem});"
            f" see lockrun status {holder.name}; lockrun unlock {force}{holder.name} clears it"
        )
    if holder.cooling_until:
        return (
            f"{busy}: its last run is over, but --min-hold keeps it taken for another"
            f" {human_duration(holder.ttl_remaining_s)}; lockrun unlock {holder.name} ends that"
        )
    if holder.ttl_remaining_s is None:  # a kernel lock: it cannot outlive its holder
        return f"{who}; it is freed when that process exits"
    return (
        f"{who}, lease expires in {human_duration(holder.ttl_remaining_s)};"
        f" if that holder crashed: lockrun unlock {holder.name}"
    )


class Run:
    def __init__(
        self,
        options: RunOptions,
        *,
        backend_factory: Callable[[float], Backend],
        ledger_path,
        backend_name: str,
        report: Report,
        ledger_keep_days: int | None = None,
        metrics_file=None,
        backend_where: str | None = None,
        backend_from: str | None = None,
    ) -> None:
        self.options = options
        self.backend_factory = backend_factory
        self.ledger_path = ledger_path
        self.backend_name = backend_name
        self.backend_where = backend_where  # without credentials: it goes to the ledger and messages
        self.backend_from = backend_from
        self._error_said = False  # an error line went out: the run's one line is said

        def say(level: str, message: str) -> None:
            if level == "error":
                self._error_said = True
            report(level, message)

        self.report = say
        self._ledger_problem: str | None = None  # why the ledger could not be opened, not yet said
        self.ledger_keep_days = ledger_keep_days
        self.call_timeout = options.call_timeout or call_timeout_for(options.ttl)
        self.metrics_file = metrics_file
        self.run_id = uuid.uuid4().hex
        self.token = os.urandom(16).hex()  # 128 random bits from the kernel CSPRNG, new for every run
        self.ledger: Ledger | None = None
        # When lockrun began: the running row's started_at until the command starts.
        self.invoked_wall = utc_now_iso()
        # The command's own start and end: the final row's started_at, ended_at and duration_s.
        # A run whose command never started keeps invoked_wall, ends when lockrun gave up, and
        # has no duration.
        self.command_started_wall: str | None = None
        self.ended_wall: str | None = None
        self.duration_s: float | None = None
        # From the first attempt to take the lock (connecting included) until it was ours or
        # lockrun gave up; None when it never tried (the command cannot run, the URL is unusable).
        self.acquire_started_mono: float | None = None
        self.waited_s: float | None = None
        self.start_ping = None  # notify.StartPing, when --ping is given and the command started
        self._escalated_after: int | None = None  # the forwarded signal that set a SIGKILL deadline
        self._lost_under_continue = False  # the lease was lost, and --on-lost continue let the command finish
        self._token_noted: threading.Thread | None = None

    # -- ledger (best effort: a broken ledger never stops the command) ------------------

    def _ledger_call(self, action: str, fn) -> None:
        if self.ledger is None:
            return
        try:
            fn(self.ledger)
        except LedgerError as exc:
            self.report("warn", f"cannot {action} the run ledger ({exc}); the command runs regardless")
            self.ledger.close()
            self.ledger = None

    def _open_ledger(self) -> None:
        # A ledger that cannot be opened is said once, when it is clear what that means for
        # the run (see _say_ledger_problem): often the state directory is also what the
        # local backend needs, and then the backend's error is the one line to print.
        try:
            self.ledger = Ledger(self.ledger_path).open()
        except LedgerError as exc:
            self._ledger_problem = f"cannot open the run ledger ({exc})"
            self.ledger = None
            return
        record = RunRecord(
            run_id=self.run_id,
            name=self.options.name,
            command=self.options.argv,
            backend=self.backend_name,
            started_at=self.invoked_wall,
            pid_start=host.own_start(),
            once_key=self.options.once_key,
            backend_where=self.backend_where,
            backend_from=self.backend_from,
        )
        try:
            self.ledger.start(record)
        except LedgerError as exc:
            self._ledger_problem = f"cannot write to the run ledger ({exc})"
            self.ledger.close()
            self.ledger = None

    def _say_ledger_problem(self, command_runs: bool) -> None:
        """Warn once that this run has no ledger row, in words that fit what happens next."""
        if self._ledger_problem is None:
            return
        problem, self._ledger_problem = self._ledger_problem, None
        if command_runs:
            self.report("warn", f"{problem}; the command runs regardless")
        elif not self._error_said:
            self.report("warn", f"{problem}; this run is not recorded")

    def _note_command_start(self, fencing_token: int) -> None:
        """Put the fencing token, the command's start and the wait on the running row, from a
        thread: a busy ledger must never hold up the loop that enforces the lease, and a SIGKILLed
        holder's row should still name them."""
        ledger = self.ledger
        if ledger is None:
            return
        started_at, waited_s = self.command_started_wall, self.waited_s

        def write() -> None:
            try:
                ledger.record_command_start(self.run_id, fencing_token=fencing_token, started_at=started_at,
                                            waited_s=waited_s)
            except LedgerError as exc:
                self.report("warn", f"cannot write to the run ledger ({exc}); the command runs regardless")

        noting = threading.Thread(target=write, name="lockrun-ledger", daemon=True)
        try:
            noting.start()
        except RuntimeError:
            return  # no thread for it: the final row carries the fencing token all the same
        self._token_noted = noting

    def _finish_ledger(self, outcome: Outcome) -> None:
        if self._token_noted is not None:
            self._token_noted.join()  # one connection, one writer at a time
        row = self._as_ledger_row(outcome)
        final = {key: row[key] for key in FINAL_FIELDS}
        self._ledger_call(
            "write to", lambda ledger: ledger.finish(self.run_id, **final, output_tail=outcome.output_tail)
        )
        if self.ledger_keep_days:
            keep_s = self.ledger_keep_days * 86400.0
            self._ledger_call("prune", lambda ledger: ledger.prune_now_and_then(iso_ago(keep_s)))
        if self.metrics_file is not None and self.ledger is not None:
            self._write_metrics()
        if self.ledger is not None:
            self.ledger.close()

    def _write_metrics(self) -> None:
        from lockrun import metrics  # only runs that asked for it pay for the import

        try:
            metrics.write_file(self.metrics_file, metrics.exposition(metrics.ledger_facts(self.ledger)))
        except (OSError, LedgerError) as exc:
            self.report("warn", f"cannot write the metrics file {self.metrics_file} ({exc})")

    # -- the run ------------------------------------------------------------------------

    def execute(self) -> Outcome:
        self._open_ledger()
        try:
            check_runnable(self.options.argv)
        except CommandNotRunnable as exc:
            self.report("error", str(exc))
            outcome = Outcome(exit_code=exc.exit_code, status=Status.ERROR, error=str(exc))
        else:
            outcome = self._run_under_lock()
        self._say_ledger_problem(command_runs=False)
        self._mark_ended()
        # The lock is released by now: telling someone may take seconds, never the lease.
        outcome = self._tell(outcome)
        self._finish_ledger(outcome)
        return outcome

    def _run_under_lock(self) -> Outcome:
        # lockrun's own credentials stay with lockrun: no Redis password in the command's environment.
        env = {**environment_for_command(os.environ), "LOCKRUN_NAME": self.options.name,
               "LOCKRUN_RUN_ID": self.run_id}
        supervisor = Supervisor(self.options.argv, env=env, capture_tail=self.options.capture_tail)
        supervisor.signals.install()
        backend = None
        try:
            try:
                backend = self.backend_factory(self.call_timeout)
                self.acquire_started_mono = time.monotonic()  # the client is made: the wait begins
                outcome = self._locked_run(backend, supervisor)
            except BackendUnavailable as exc:
                outcome = Outcome(exit_code=ExitCode.UNAVAILABLE, status=Status.UNAVAILABLE, error=str(exc))
                self.report("error", str(exc))
            except LockrunError as exc:
                outcome = Outcome(exit_code=exc.exit_code, status=Status.ERROR, error=str(exc))
                self.report("error", str(exc))
            except Exception as exc:  # noqa: BLE001 - recorded, then reported as exit 125
                outcome = Outcome(exit_code=ExitCode.INTERNAL, status=Status.ERROR, error=f"lockrun failed: {exc!r}")
                self.report("error", outcome.error)
        finally:
            supervisor.close()
            if backend is not None:
                backend.close()
        if self.waited_s is None and self.acquire_started_mono is not None:  # gave up, or failed
            self.waited_s = round(time.monotonic() - self.acquire_started_mono, 6)
        return outcome

    def _tell(self, outcome: Outcome) -> Outcome:
        """Final ping and webhooks; a failed delivery is a warning and a ledger note."""
        opts = self.options
        ping = opts.ping_url and (outcome.status != Status.BUSY or opts.ping_on_busy)
        notify = opts.notify_urls and outcome.status in opts.notify_on
        if not (ping or notify or self.start_ping):
            return outcome
        from lockrun import notify as telling  # only runs that asked for it pay for urllib

        failures = [self.start_ping.wait()] if self.start_ping else []
        run = self._as_ledger_row(outcome)
        jobs = []
        if ping:
            body = outcome.output_tail or (busy_message(outcome.holder) if outcome.holder else outcome.error) or ""
            event = telling.ping_event(outcome.status, outcome.command_exit, outcome.signal)
            jobs.append(lambda: [telling.send_ping(opts.ping_url, event, self.run_id, body)])
        if notify:
            holder = None
            if outcome.holder:  # never the holder's owner token: with it anyone could delete the lock
                holder = {k: v for k, v in outcome.holder._asdict().items() if k in HOLDER_FIELDS_FOR_PAYLOAD}
            payload = telling.webhook_payload(run, holder, outcome.output_tail)
            jobs.append(lambda: telling.send_webhooks(list(opts.notify_urls), payload, opts.notify_slack))
        for job in jobs:
            failures += job()
        failures = [f for f in failures if f]
        if not failures:
            return outcome
        summary = "; ".join(failures)
        self.report("warn", f"could not deliver notifications: {summary}")
        note = f"{outcome.note}; " if outcome.note else ""
        return outcome._replace(note=f"{note}notification failed: {summary}")

    def _as_ledger_row(self, outcome: Outcome) -> dict:
        """The run's final row as ``history --json`` shows it: the one mapping from an outcome to
        what the ledger, webhooks and every other record of the run say."""
        return {
            "run_id": self.run_id, "name": self.options.name, "status": outcome.status,
            "exit_code": outcome.command_exit, "signal": outcome.signal,
            "exit_status": outcome.exit_code,  # what lockrun exits with: what cron and the shell see
            "host": host.hostname(), "pid": os.getpid(), "command": self.options.argv,
            "backend": self.backend_name,
            "started_at": self.command_started_wall or self.invoked_wall, "ended_at": self.ended_wall,
            "duration_s": self.duration_s, "waited_s": self.waited_s,
            "fencing_token": outcome.fencing_token, "once_key": self.options.once_key, "error": outcome.error,
            "note": outcome.note,
        }

    def _backend_label(self) -> str:
        """``redis redis://host:6379/0`` or ``local backend, this host only``: no credentials."""
        if self.backend_name == "local":
            return "local backend, this host only"
        return f"redis {self.backend_where}" if self.backend_where else "redis"

    def _holder_info(self) -> dict[str, str]:
        now = utc_now_iso()
        return {
            "token": self.token,
            "run_id": self.run_id,
            "host": host.hostname(),
            "boot_id": host.boot_id(),
            "pid": str(os.getpid()),
            "pid_start": str(host.own_start() or ""),
            "child_pid": "",
            "command": json.dumps(self.options.argv),
            "started_at": now,
            "heartbeat_at": now,
            "ttl_ms": str(int(self.options.ttl * 1000)),
        }

    def _acquire(self, backend: Backend, supervisor: Supervisor) -> Lease | Holder | Duplicate:
        """The lease, the holder that kept us out until --wait ran out (or a signal came), or a duplicate."""
        opts = self.options
        once = OnceKey(opts.once_key, opts.remember) if opts.once_key else None
        give_up_at = time.monotonic() + (opts.wait or 0.0)
        deadline_known = opts.wait is not None  # --replace without --wait: known once the holder is
        asked: str | None = None  # the holder token we asked to stop (--replace)
        while True:
            # The try at or after the deadline decides: a busy answer to it is this run's
            # outcome, which the fleet record counts (earlier busy answers are only waiting).
            last_try = deadline_known and time.monotonic() >= give_up_at
            try:
                result = backend.acquire(opts.name, self.token, opts.ttl, self._holder_info(), once, opts.slots,
                                         last_try=last_try)
            except BackendUnavailable:
                # The script may have run even though its reply never came back, or it ran but
                # too few replicas acknowledged it (--replicas): give back whatever our token
                # holds rather than leave it stuck for a whole TTL.
                self._forget(backend, opts.name)
                raise
            if not deadline_known and isinstance(result, Holder):
                # --replace without --wait: long enough for the holder to notice at its next
                # renewal (TTL/3 of *its* lease) and to stop its command (--kill-after).
                holder_ttl = result.ttl_ms / 1000.0 if result.ttl_ms else opts.ttl
                give_up_at = time.monotonic() + holder_ttl + opts.kill_after
                deadline_known = True
            if not isinstance(result, Holder) or supervisor.signals.received or last_try:
                return result
            left = give_up_at - time.monotonic()
            if left <= 0:
                continue  # the deadline passed during this try: one last one decides
            if opts.replace and result.token != asked:
                # Ask once per holder; its keeper stops its command at the next renewal
                # (TTL/3 at most), then releases, which wakes us.
                asked = result.token
                if backend.preempt(opts.name, self.run_id, left):
                    self.report("info", f"asked {result.host}:{result.pid} to stop (--replace)")
            # Get everything the spawn needs ready now, so that the hand-over is only
            # the acquire round trip and an exec.
            supervisor.prepare()
            # Sleep until a release wakes us, or until the holder's lease could have
            # expired (a crashed holder pushes nothing), and at most a second.
            expiry = result.ttl_remaining_s if result.ttl_remaining_s is not None else 1.0
            backend.wait_for_release(opts.name, min(left, expiry + 0.005, 1.0))

    def _forget(self, backend: Backend, name: str) -> None:
        # Under --slots, the slot our token holds, not the plain key.
        try:
            backend.release_token(name, self.token, self.options.slots)
        except BackendUnavailable:
            pass

    def _locked_run(self, backend: Backend, supervisor: Supervisor) -> Outcome:
        opts = self.options
        got = self._acquire(backend, supervisor)
        self.waited_s = round(time.monotonic() - self.acquire_started_mono, 6)
        if supervisor.signals.received:
            signum = supervisor.signals.received[0]
            error = f"interrupted by signal {signum} before the command started"
            outcome = Outcome(exit_code=ExitCode.SIGNAL_BASE + signum, status=Status.ERROR, error=error)
            if isinstance(got, Lease):
                self._mark_ended()
                self._release(backend, got, record=FleetRecord(self._as_ledger_row(outcome)))
            self.report("error", error)
            return outcome
        if isinstance(got, Duplicate):
            note = f"--once key {got.key!r} already succeeded"
            self.report("info", f"{opts.name!r}: {note}; skipped")
            return Outcome(exit_code=ExitCode.OK, status=Status.DUPLICATE, note=note)
        if isinstance(got, Holder):
            note = f"held by {got.describe()}" + (f"; malformed: {got.problem}" if got.problem else "")
            # Data lockrun did not write may never go away by itself: worth a line even without -v.
            self.report("warn" if got.problem else "info", busy_message(got, self._backend_label()))
            return Outcome(exit_code=opts.busy_exit_code, status=Status.BUSY, note=note, holder=got)
        lease = got
        try:
            outcome = self._supervise(backend, supervisor, lease)
        except BaseException as exc:
            self._mark_ended()
            failed = Outcome(exit_code=ExitCode.INTERNAL, status=Status.ERROR, error=f"lockrun failed: {exc!r}",
                             fencing_token=lease.fencing_token)
            self._release(backend, lease, record=FleetRecord(self._as_ledger_row(failed)))
            raise
        self._mark_ended()
        # After a lost lease the release is a formality that may well fail: try once, quietly.
        lost = outcome.status in (Status.LOST, Status.PREEMPTED) or self._lost_under_continue
        hold_s = 0.0
        if opts.min_hold and not lost:
            hold_s = max(0.0, opts.min_hold - (time.monotonic() - lease.sent_at))
        hold_until = iso_ago(-hold_s) if hold_s else ""
        if hold_s:
            note = f"{outcome.note}; " if outcome.note else ""
            outcome = outcome._replace(note=f"{note}--min-hold keeps the lock taken until {hold_until}")
        record = FleetRecord(self._as_ledger_row(outcome), outcome.output_tail)
        self._release(backend, lease, lost=lost, succeeded=outcome.status == Status.SUCCEEDED, hold_s=hold_s,
                      hold_until=hold_until, record=record)
        return outcome

    def _mark_ended(self) -> None:
        """The run's end: the command is gone (or never started); releasing and telling come after.
        A command that ran has its end and duration already (see _supervise); one that never
        started ends now and has no duration."""
        if self.ended_wall is None:
            self.ended_wall = utc_now_iso()

    def _supervise(self, backend: Backend, supervisor: Supervisor, lease: Lease) -> Outcome:
        opts = self.options
        self.report("info", f"acquired {opts.name!r} (fencing token {lease.fencing_token}, ttl {opts.ttl:g}s)")
        # Armed before the exec: from its first instant the command cannot outlive the lease,
        # even if lockrun is stopped or starved. Not under --on-lost continue, which asks for that.
        backstop = Backstop() if opts.on_lost == "terminate" else None
        if backstop is not None:
            backstop.arm(backstop_for(lease.sent_at + lease.ttl, lease.ttl))
            if backstop.error:
                # Run without it rather than not at all (a sandbox may forbid POSIX timers), but say so.
                self.report("warn", f"no backstop timer ({backstop.error}): if lockrun is stopped or starved, "
                                    "its command may outlive the lease")
        self._say_ledger_problem(command_runs=True)
        try:
            command_started_mono = time.monotonic()
            command_started_wall = utc_now_iso()
            child_pid = supervisor.spawn({"LOCKRUN_FENCING_TOKEN": str(lease.fencing_token)})
        except CommandNotRunnable as exc:
            if backstop is not None:
                backstop.disarm()
            self.report("error", str(exc))
            return Outcome(exit_code=exc.exit_code, status=Status.ERROR, error=str(exc), fencing_token=lease.fencing_token)
        self.command_started_wall = command_started_wall
        keeper = None
        try:
            # From here on the command runs: whatever fails, it is stopped before the lock goes.
            self._note_command_start(lease.fencing_token)
            if opts.ping_url:
                from lockrun.notify import StartPing

                self.start_ping = StartPing(opts.ping_url, self.run_id)
            keeper = Keeper(
                backend,
                lease,
                stop_grace=opts.kill_after,
                call_timeout=self.call_timeout,
                wake=supervisor.signals.wake,
                child_pid=lambda: child_pid,
                on_renewed=(lambda expires_at: backstop.arm(backstop_for(expires_at, lease.ttl))) if backstop else None,
            )
            keeper.start()  # a keeper that cannot start marks the lease lost: _watch stops the command
            stop_reason, lost_note = self._watch(supervisor, keeper, backstop)
        finally:
            # Also on an unexpected error: the group is gone before the lock is released.
            if backstop is not None:
                backstop.disarm()  # the command is gone or going: what follows may outlast the lease
            child = supervisor.finish()
            self.ended_wall = utc_now_iso()
            self.duration_s = round(time.monotonic() - command_started_mono, 6)
            if keeper is not None:
                keeper.stop()
        if stop_reason == Status.LOST and keeper.preempted:
            stop_reason = Status.PREEMPTED
        self._lost_under_continue = lost_note is not None
        tail = supervisor.tail.text() if supervisor.tail else None
        outcome = self._outcome(child, stop_reason, lost_note, lease, tail)
        notes = [outcome.note] if outcome.note else []
        if self._escalated_after is not None and child.signal == signal.SIGKILL:
            notes.append(f"killed --kill-after {opts.kill_after:g}s after signal {self._escalated_after} was forwarded")
        if backstop is not None and backstop.error:
            notes.append(f"no backstop timer: {backstop.error}")
        return outcome._replace(note="; ".join(notes) or None)

    def _watch(
        self, supervisor: Supervisor, keeper: Keeper, backstop: Backstop | None
    ) -> tuple[str | None, str | None]:
        """Wait for the child to exit, stopping it on a lost lease or a timeout.

        Returns why lockrun stopped the command ("lost", "timeout" or None) and,
        under ``--on-lost continue``, the note about a lost lease.
        """
        opts = self.options
        timeout_at = time.monotonic() + opts.timeout if opts.timeout else None
        stop_reason: Status | None = None
        lost_note: str | None = None
        lease_lost = False
        while not supervisor.child_exit_pending():
            now = time.monotonic()
            if supervisor.signals.received and self._escalated_after is None:
                # A forwarded SIGTERM, SIGINT or SIGHUP asks the command to stop: one that ignores
                # it is killed after --kill-after, so that nothing waits on it forever.
                self._escalated_after = supervisor.signals.received[0]
                supervisor.kill_later(now + opts.kill_after)
                self.report("info", f"forwarded signal {self._escalated_after} to the command; SIGKILL in "
                                    f"{opts.kill_after:g}s if it is still running")
            problem = None if lease_lost else self._lease_problem(keeper, now)
            if problem is not None:
                lease_lost = True
                if opts.on_lost == "terminate":
                    if stop_reason is None:
                        stop_reason = Status.LOST
                        if keeper.preempted:
                            self.report("warn", f"{opts.name!r}: {problem}; stopping the command")
                        else:
                            self.report("error", f"lease on {opts.name!r} lost: {problem}; stopping the command")
                    # Dead before the lease we last renewed can expire, however long --kill-after is.
                    supervisor.terminate(kill_at=min(now + opts.kill_after, keeper.kill_deadline()))
                else:
                    lost_note = f"lease lost at {utc_now_iso()}: {problem}"
                    self.report("warn", f"lease on {opts.name!r} lost: {problem}; --on-lost continue: the command goes on")
            if timeout_at is not None and now >= timeout_at and stop_reason is None:
                stop_reason = Status.TIMEOUT
                self.report("error", f"{opts.name!r} ran past --timeout {opts.timeout:g}s; stopping the command")
                supervisor.terminate(kill_at=now + opts.kill_after)
            supervisor.kill_if_due()
            if supervisor.killed and backstop is not None:
                backstop.disarm()  # SIGKILL is sent: the command cannot outlive the lease any more
            wake_at = [supervisor.kill_at]
            if stop_reason is None:
                wake_at.append(timeout_at)
            if not lease_lost:
                wake_at.append(keeper.must_stop_at)
            supervisor.signals.wait(min((t for t in wake_at if t is not None), default=None))
        return stop_reason, lost_note

    @staticmethod
    def _lease_problem(keeper: Keeper, now: float) -> str | None:
        """Why the lease can no longer be trusted, or None while it can."""
        if keeper.lost_reason is not None:
            return keeper.lost_reason
        if now >= keeper.must_stop_at:
            silent_for = now - (keeper.expires_at - keeper.lease.ttl)
            why = keeper.last_error or "no renewal succeeded in time"
            return f"no renewal succeeded for {silent_for:.1f}s ({why})"
        return None

    def _outcome(
        self, child: ChildExit, stop_reason: Status | None, lost_note: str | None, lease: Lease, tail: str | None
    ) -> Outcome:
        common = dict(command_exit=child.returncode, signal=child.signal, fencing_token=lease.fencing_token,
                      output_tail=tail)
        if stop_reason in (Status.LOST, Status.PREEMPTED):
            return Outcome(exit_code=ExitCode.LOST, status=stop_reason, **common)
        if stop_reason == Status.TIMEOUT:
            return Outcome(exit_code=ExitCode.TIMEOUT, status=Status.TIMEOUT, **common)
        if child.signal is not None:
            return Outcome(exit_code=child.shell_code, status=Status.KILLED, note=lost_note, **common)
        status = Status.SUCCEEDED if child.returncode == 0 else Status.FAILED
        return Outcome(exit_code=child.returncode, status=status, note=lost_note, **common)

    def _release(
        self, backend: Backend, lease: Lease, lost: bool = False, succeeded: bool = False, hold_s: float = 0.0,
        hold_until: str = "", record: FleetRecord | None = None,
    ) -> None:
        """Compare-and-delete (marking a --once key done, or cooling for --min-hold, and adding
        ``record`` to the fleet record), retried a little; the token is kept until then."""
        last_error = None
        for attempt in range(1 if lost and not succeeded else RELEASE_ATTEMPTS):
            try:
                released = backend.release(lease, succeeded=succeeded, hold_s=hold_s, hold_until=hold_until,
                                           record=record)
            except BackendUnavailable as exc:
                last_error = exc
                time.sleep(0.05 * (attempt + 1))
                continue
            self.report("info", f"released {lease.name!r}" if released else f"{lease.name!r} was no longer ours")
            return
        message = f"could not release {lease.name!r} ({last_error}); it expires within {lease.ttl:g}s"
        if succeeded and lease.once is not None:
            # Worth a warning even after a lost lease: a rerun will not know the work was done.
            self.report("warn", f"{message}; --once key {lease.once.key!r} was not marked done")
            return
        self.report("info" if lost else "warn", message)
