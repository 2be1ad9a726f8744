"""``lockrun doctor``: is the backend a run would use, and this host, safe for leases?
(docs/operating.md "Checking the setup: lockrun doctor", docs/redis.md "What lockrun needs of
Redis").

The backend is the one ``run`` would open (the same settings, resolved the same way); it
gathers its facts read-only (``Backend.audit``) and this module judges them, one Check each:
OK, WARN (lockrun works, but something can go wrong, or a value could not be read) or FAIL (runs
fail, or a job can run twice). The verdict is the worst of them, and "unknown" when the backend
could not be checked at all (unreachable, authentication refused, a configuration that cannot be
read): exit 0, 1, 2 or 3.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from lockrun.backends.audit import BackendAudit, ServerFacts
from lockrun.config import options
from lockrun.core.errors import BackendUnavailable, LockrunError
from lockrun.views import doctor_server as judge
from lockrun.views.doctor_acl import acl
from lockrun.views.doctor_check import FAIL, OK, SEVERITY, Check, seconds_text
from lockrun.views.doctor_host import directory_check
from lockrun.views.doctor_topology import probe_check, topology_check

if TYPE_CHECKING:
    from lockrun.config.settings import Settings

#: The exit code of each verdict (README "Exit codes": doctor).
EXIT_CODES = {"ok": 0, "warn": 1, "fail": 2, "unknown": 3}
#: The probe's lease: long enough for a slow server's round trips, short enough that a probe
#: that fails half-way holds nothing for long (its keys are removed anyway).
PROBE_TTL_S = 5.0


class DoctorReport(NamedTuple):
    checks: tuple[Check, ...]
    could_not_check: bool = False  # the backend could not be asked (unreachable, refused, no settings)

    @property
    def verdict(self) -> str:
        if self.could_not_check:
            return "unknown"
        worst = max((SEVERITY[check.status] for check in self.checks), default=0)
        return {0: "ok", 1: "warn", 2: "fail"}[worst]

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def as_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "checks": [check.as_json() for check in self.checks]}


def cannot_check(error: LockrunError, state_dir: Path | None = None) -> DoctorReport:
    """The report when the settings cannot be had (a config or password file, a URL redis-py
    refuses): one FAIL line, verdict unknown (exit 3), and this host's state directory all the same
    (``state_dir``: the settings', else where LOCKRUN_STATE_DIR or the default puts it)."""
    import os

    from lockrun.config.state_home import default_state_dir
    from lockrun.system.directory import directory_facts

    fix = f"correct what it names: a run refuses it too (exit {error.exit_code})"
    checks = [Check("config", FAIL, " ".join(str(error).split()), fix)]
    if state_dir is None:
        named = os.environ.get(options.STATE_DIR.env or "")  # as the settings would have taken it
        try:
            state_dir = Path(named) if named else default_state_dir()
        except LockrunError:  # no home to put it in: the FAIL line is what there is to say
            return DoctorReport(tuple(checks), could_not_check=True)
    checks.append(directory_check(directory_facts(state_dir, "the state directory"), local=True))
    return DoctorReport(tuple(checks), could_not_check=True)


def _backend_line(settings: Settings) -> Check:
    if settings.redis_url:
        return Check("backend", OK, f"redis {settings.redacted_url} ({settings.backend_from}); runs' TTL"
                                    f" {seconds_text(settings.ttl)}")
    return Check("backend", OK, f"local: kernel locks in {settings.backend_where}, which exclude runs on this host only"
                                " (no Redis URL configured: set redis_url for locks across hosts)")


def _server_checks(facts: ServerFacts, context: judge.Context, settings: Settings, several: bool) -> list[Check]:
    if judge.is_sentinel(facts):  # the server line says what to do; the others would only repeat it
        return [judge.reachable(facts, context), judge.server(facts, context)]
    found = [judge.reachable(facts, context), judge.server(facts, context), judge.eviction(facts, context),
             judge.persistence(facts), judge.appendfsync(facts), judge.role(facts), judge.replicas(facts, context),
             judge.clock(facts, context), judge.commands(facts), acl(facts.acl, settings.prefix)]
    checks = [check for check in found if check is not None]
    if several:  # every master of a Cluster: say which one each line is about
        checks = [check._replace(detail=f"{facts.where}: {check.detail}") for check in checks]
    return checks


def judge_audit(audit: BackendAudit, settings: Settings, probe: bool) -> DoctorReport:
    """Every check of what the backend and this host said."""
    from lockrun.system.directory import directory_facts

    checks = [_backend_line(settings)]
    local = audit.backend == "local"
    if audit.unreachable:
        checks.append(Check("reachable", FAIL, " ".join(audit.unreachable.split()),
                            "check that the server runs, that this host reaches it, and the URL, user and password"
                            " (redis_password_file)"))
    else:
        checks += _servers_checks(audit, settings)
    directories = audit.directories or (directory_facts(settings.state_dir, "the state directory"),)
    checks += [directory_check(facts, local) for facts in directories]
    if probe and not audit.unreachable:
        checks.append(probe_check(audit.probe))
    return DoctorReport(tuple(checks), could_not_check=bool(audit.unreachable))


def _servers_checks(audit: BackendAudit, settings: Settings) -> list[Check]:
    """The topology (Sentinel, Cluster), then each server's checks."""
    from lockrun.backends.connect import call_timeout_for

    plan = settings.plan
    context = judge.Context(ttl=settings.ttl, call_s=call_timeout_for(settings.ttl, settings.socket_timeout),
                            replicas=plan[options.REPLICAS], allow_eviction=plan[options.ALLOW_EVICTION],
                            min_hold=plan[options.MIN_HOLD], cluster_url=audit.topology is not None
                            and audit.topology.kind == "cluster")
    checks = [] if audit.topology is None else [topology_check(audit.topology, len(audit.servers))]
    for facts in audit.servers:
        checks += _server_checks(facts, context, settings, several=len(audit.servers) > 1)
    return checks


def doctor_report(settings: Settings, probe: bool) -> DoctorReport:
    """Open the backend ``run`` would use, ask it, and judge what it said."""
    from lockrun.backends.connect import call_timeout_for, open_backend

    # A run allows a call TTL/5 (at most 5 s); the doctor waits at least a second for an answer, so
    # that it can say how slow a server is rather than only that it was too slow.
    timeout = max(call_timeout_for(settings.ttl, settings.socket_timeout), 1.0)
    try:
        backend = open_backend(settings, timeout, settings.connect_timeout, replicas=settings.plan[options.REPLICAS],
                               allow_eviction=settings.plan[options.ALLOW_EVICTION])
    except BackendUnavailable as exc:
        audit = BackendAudit(settings.backend_name, settings.backend_where, unreachable=str(exc))
    except LockrunError as exc:  # a URL redis-py refuses, a password file that cannot be read
        return cannot_check(exc, settings.state_dir)
    else:
        try:
            audit = backend.audit(min(PROBE_TTL_S, settings.ttl) if probe else None)
        finally:
            backend.close()
    return judge_audit(audit, settings, probe)

