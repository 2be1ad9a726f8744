"""What a run's options come to (run/command.py works it out from the plan; the runner reads it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lockrun.core.secret_names import Masking
    from lockrun.core.zones import Zone


class Job:
    """What this run's options come to, beside the plan itself: its argv and name, its ``--once``
    key and zone, its declared cadence, how much output it keeps, what its record masks. A plain
    class: it is made on every run's path."""

    __slots__ = ("argv", "name", "once_key", "once_zone", "cadence", "failure_tail", "output_on_failure",
                 "masking", "wait", "min_hold", "call_timeout")

    def __init__(self, argv: list[str], name: str, *, once_key: str | None = None, once_zone: Zone | None = None,
                 cadence: str | None = None, failure_tail: int | None = None, output_on_failure: bool = False,
                 masking: Masking | None = None, wait: float | None = 0.0, min_hold: float | None = None,
                 call_timeout: float = 5.0) -> None:
        from lockrun.core.secret_names import BUILT_IN

        self.argv = argv
        self.name = name
        self.once_key = once_key  # already strftime-expanded
        self.once_zone = once_zone  # the zone of a time-derived --once key (docs/guarantees.md "One zone per name")
        self.cadence = cadence  # the declared cadence, as stored (core/cadence: --every/--schedule, --grace)
        self.failure_tail = failure_tail  # without --capture-tail: bytes a failed run keeps in this host's ledger
        self.output_on_failure = output_on_failure  # --output on-failure: held back, written out if it failed
        self.masking = masking or BUILT_IN  # what the recorded command line hides (config redact, record_command)
        self.wait = wait  # None with --replace: the holder's TTL + --kill-after
        self.min_hold = min_hold  # keep the lock taken this long after acquiring it, at least
        self.call_timeout = call_timeout  # the bound on one backend call
