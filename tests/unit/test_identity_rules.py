"""Which records a pid, a boot id or a heartbeat may condemn (README "Is the holder alive?").

The facts about this process (boot id, machine id, PID namespace, whether /proc is ours) and
the kernel's answer about a pid are set here; the rules are host.py's and status.py's."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lockrun.backends.values import Holder
from lockrun.system import host
from lockrun.views.status import zombie_reason

BOOT, OTHER_BOOT = "b" * 8, "c" * 8
MACHINE, OTHER_MACHINE = "a" * 32, "d" * 32
NS = 4026531836
DEAD = 4242  # the pid the kernel says is gone


@pytest.fixture(autouse=True)
def this_process(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """This process runs on MACHINE in BOOT, namespace NS, with its own /proc; uptime an hour."""

    def facts(machine: str = MACHINE, boot: str = BOOT, namespace: int | None = NS, proc: bool = True) -> None:
        monkeypatch.setattr(host, "machine_id", lambda: machine)
        monkeypatch.setattr(host, "boot_id", lambda: boot)
        monkeypatch.setattr(host, "pid_ns", lambda: namespace)
        monkeypatch.setattr(host, "proc_is_ours", lambda: proc)
        monkeypatch.setattr(host, "hostname", lambda: "app-1")
        monkeypatch.setattr(host, "uptime_s", lambda: 3600.0)
        monkeypatch.setattr(host, "same_process_alive", lambda pid, start: pid != DEAD)
        monkeypatch.setattr(host, "alive_in_any_namespace", lambda pid, start, namespace=None: pid != DEAD)

    facts()
    return facts


def origin(**fields: object) -> host.Origin:
    values: dict[str, object] = {"boot": BOOT, "pid": DEAD, "start": 7, "namespace": NS, "machine": MACHINE, **fields}
    return host.Origin.of(values["boot"], values["pid"], values["start"], values["namespace"], values["machine"])


def test_a_pid_is_evidence_only_in_our_machine_boot_and_namespace(this_process: Callable[..., None]) -> None:
    assert origin().process_gone()
    assert not origin(pid=DEAD + 1).process_gone()  # alive
    assert not origin(namespace=NS + 1).process_gone()  # another PID namespace
    assert not origin(machine=OTHER_MACHINE).process_gone()  # another machine
    assert not origin(machine="").process_gone()  # a machine that did not say
    assert not origin(boot=OTHER_BOOT, machine="").process_gone()
    assert not origin(boot=OTHER_BOOT, machine=OTHER_MACHINE).process_gone()
    this_process(proc=False)  # /proc of another namespace: /proc/PID is not our PID
    assert not origin().process_gone()
    this_process(machine="")  # neither side has a machine id: the boot and the namespace decide
    assert origin(machine="").process_gone() and not origin().process_gone()


def test_an_earlier_boot_needs_a_machine_id_on_both_sides() -> None:
    assert origin(boot=OTHER_BOOT).earlier_boot()
    assert not origin(boot=OTHER_BOOT, machine="").earlier_boot()
    assert not origin(boot=OTHER_BOOT, machine=OTHER_MACHINE).earlier_boot()
    assert not origin(boot="").earlier_boot() and not origin().earlier_boot()


def test_an_earlier_boot_without_a_machine_id_here_is_not_judged(this_process: Callable[..., None]) -> None:
    this_process(machine="")
    assert not origin(boot=OTHER_BOOT).earlier_boot()


@pytest.mark.parametrize("fields", [
    {"namespace": "pid:[4026531836]"}, {"namespace": -1}, {"namespace": 1 << 40}, {"namespace": [1]},
    {"machine": "uninitialized"}, {"machine": "A" * 32}, {"machine": 5}, {"boot": 12},
])
def test_unusable_identity_fields_condemn_nothing(fields: dict[str, object]) -> None:
    record = origin(**fields)
    assert record.doubtful and not record.process_gone() and not record.earlier_boot()
    assert not host.known_dead(fields.get("boot", BOOT), DEAD, 7, fields.get("namespace", NS),
                               fields.get("machine", MACHINE))


def test_a_record_without_namespace_and_machine_id_condemns_nothing(this_process: Callable[..., None]) -> None:
    """Written where /proc and machine-id(5) could not be read: not malformed, but its pid may be
    another namespace's (the stand-in here says that pid is gone in every one) and without a
    machine id there is no earlier boot. Nothing proves it dead, for the ledger or for status."""
    unsaid = origin(namespace=None, machine="")
    assert not unsaid.doubtful
    assert not unsaid.process_gone() and not unsaid.process_gone(search_every_namespace=True)
    assert not host.known_dead(BOOT, DEAD, 7) and not host.known_dead(OTHER_BOOT, DEAD, 7)
    assert not host.known_dead(OTHER_BOOT, DEAD, 7, NS, "")  # a namespace, no machine id: no boot judgement
    written = holder(pid_ns="", machine_id="")
    assert written.problem is None and zombie_reason(written.with_age(None)) is None
    this_process(machine="")  # neither side has a machine id: one machine, but still no namespace
    assert not origin(namespace=None, machine="").process_gone()
    assert zombie_reason(written.with_age(None)) is None


def holder(**fields: object) -> Holder:
    record: dict[str, object] = {"token": "t", "host": "app-1", "boot_id": BOOT, "pid": str(DEAD),
                                 "pid_start": "7", "pid_ns": str(NS), "machine_id": MACHINE, "ttl_ms": "60000",
                                 "heartbeat_at": "2026-12-01T10:00:00.000000Z", **fields}
    return Holder.from_fields("job", record)


def test_zombie_reasons() -> None:
    assert "no longer runs" in (zombie_reason(holder().with_age(None)) or "")
    assert zombie_reason(holder(pid=str(DEAD + 1))._replace(heartbeat_age_s=10.0)) is None
    assert "by the server's clock" in (zombie_reason(holder(pid=str(DEAD + 1))._replace(heartbeat_age_s=47.0)) or "")
    assert zombie_reason(holder(pid=str(DEAD + 1))._replace(heartbeat_age_s=45.0)) is None  # 2/3 TTL + 6 s margin
    assert zombie_reason(holder(pid=str(DEAD + 1))._replace(heartbeat_age_s=None)) is None  # no server clock: no age
    # A kernel lock's holder is alive, whatever its description says.
    assert zombie_reason(holder()._replace(kernel_held=True, heartbeat_age_s=1e6)) is None


def test_an_earlier_boot_must_also_have_fallen_silent_before_this_boot() -> None:
    """A clone that copied the machine id, renewing: not our past. (Uptime here: an hour.)"""
    past = holder(boot_id=OTHER_BOOT, pid=str(DEAD + 1), ttl_ms=str(3 * 86400 * 1000))
    assert zombie_reason(past._replace(heartbeat_age_s=20.0)) is None
    assert zombie_reason(past._replace(heartbeat_age_s=3000.0)) is None  # since this boot
    assert zombie_reason(past._replace(heartbeat_age_s=5000.0)) is None  # before it, but no renewal was due yet
    assert zombie_reason(past._replace(heartbeat_age_s=None)) is None
    assert "earlier boot" in (zombie_reason(past._replace(heartbeat_age_s=3 * 86400 / 3 + 0.3 * 86400 + 10)) or "")


@pytest.mark.parametrize("field,value", [
    ("pid_ns", "pid:[1]"), ("pid_ns", "0"), ("pid_ns", "4294967296"), ("machine_id", "x"), ("machine_id", "F" * 32),
])
def test_garbage_in_a_holder_is_malformed_and_never_dead(field: str, value: str) -> None:
    bad = holder(**{field: value})
    assert bad.problem is not None and field in bad.problem and field in bad.unusable
    assert zombie_reason(bad._replace(heartbeat_age_s=1.0)) is None
