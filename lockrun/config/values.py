"""Parsers of single values, each with its documented range (docs/reference.md "Ranges"): lock names, run
ids, seconds and durations, sizes, replicas, host names, notify statuses and URLs, output paths.
A bad value raises UsageError (exit 2; 78 when it came from the config file), quoting the value
through :func:`~lockrun.core.printable.quoted` (a short prefix of a long one, ``\\xff`` for a byte).

Every number is written in ASCII digits, with nothing around it (``--retry ' 2'`` and ``--ttl ١٢``
are refused alike): one rule for flags, environment variables and config values.
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path
from urllib.parse import urlsplit

from lockrun.core.clock import exact_duration
from lockrun.core.defaults import (
    ALL_REPLICAS,
    MAX_DURATION_S,
    MAX_REPLICAS,
    MAX_SECONDS,
    MAX_SUCCESS_EXITS,
    MAX_TAIL,
)
from lockrun.core.errors import UsageError
from lockrun.core.printable import quoted
from lockrun.core.record import FAILURE_STATUSES, FAILURES, FINAL_STATUSES, Status
from lockrun.system.safefs import special_file

NAME_RULE = (
    "1 to 200 characters from A-Z a-z 0-9 . _ : @ / -, starting with a letter or digit"
)
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/\-]{0,199}")
_SPAN_RE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([smhd]?)")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


# --- single values ------------------------------------------------------------------


def validate_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise UsageError(f"invalid lock name {quoted(name)}: use {NAME_RULE}")
    return name


_RUN_ID_RE = re.compile(r"[0-9a-fA-F](?:-?[0-9a-fA-F]){3,31}")


def validate_run_id(text: str) -> str:
    """A run id or the start of one: 4 to 32 of its hex digits, with or without its dashes
    (``3f2a9c1e``, ``3f2a9c1e-4b7d``). Lookups compare the hex digits alone (core/run_ids), so an
    id is found however it was copied."""
    if not _RUN_ID_RE.fullmatch(text):
        raise UsageError(f"invalid run id {quoted(text)}: use 4 to 32 hex digits of it, dashes allowed"
                         " (see lockrun history)")
    return text


def default_name(argv: list[str]) -> str:
    """``cmd-`` + 12 hex of sha256 over the argv joined by NUL.

    Joining by NUL (not space) keeps ``frob "a b"`` and ``frob a b`` apart.
    """
    digest = hashlib.sha256("\0".join(argv).encode("utf-8", "surrogateescape"))
    return "cmd-" + digest.hexdigest()[:12]


#: The one syntax of every seconds and duration value (flags, environment, config file): a
#: number of seconds (``90``, ``0.5``) or a number with a unit (``90s``, ``2m``, ``1.5h``, ``7d``).
TIME_SYNTAX = "seconds (90) or a number with a unit s, m, h or d (90s, 2m, 1.5h, 7d)"


def seconds_range(minimum: float = 0.0, allow_zero: bool = False, maximum: float = MAX_SECONDS) -> str:
    """How --help and messages state a time value's range: ``at least 1s and at most 365d``."""
    low = f"at least {minimum:g}s" if minimum > 0 else ("0 or more" if allow_zero else "more than 0")
    return f"{low} and at most {span_text(maximum)}"


def span_text(seconds: float) -> str:
    """A limit in its largest whole unit: ``365d``, ``5m``, ``90s``."""
    return exact_duration(seconds)


def parse_time_span(
    text: str | float, what: str, *, minimum: float = 0.0, allow_zero: bool = False, maximum: float = MAX_SECONDS
) -> float:
    """Seconds from ``90``, ``0.5``, ``90s``, ``2m``, ``1.5h`` or ``7d``: more than 0 (``allow_zero``:
    0 too), at least ``minimum``, at most ``maximum``; anything else is one UsageError line."""
    shown, value = _span(text)
    ok = math.isfinite(value) and (value > 0 or (allow_zero and value == 0)) and minimum <= value <= maximum
    if not ok:  # NaN compares false: also a value too long to be finite
        raise UsageError(
            f"invalid {what} {shown}: expected {TIME_SYNTAX}, {seconds_range(minimum, allow_zero, maximum)}"
        )
    return value


def _span(text: str | float) -> tuple[str, float]:
    """A time value as a message shows it, and its seconds (NaN: not written as one)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):  # a TOML number: seconds
        try:
            return repr(text), float(text)
        except (OverflowError, ValueError):  # an integer too large for a float, or to print
            return "(a number of more than 300 digits)", math.inf
    match = _SPAN_RE.fullmatch(str(text))
    return quoted(str(text)), float(match.group(1)) * _DURATION_UNITS[match.group(2) or "s"] if match else math.nan


def is_time_span(text: str) -> bool:
    """Whether ``text`` is written as a time value (``90``, ``2m``): not necessarily in range."""
    return _SPAN_RE.fullmatch(text) is not None


def parse_seconds(
    text: str, what: str, *, minimum: float = 0.0, allow_zero: bool = False, maximum: float = MAX_SECONDS
) -> float:
    """``--ttl``, ``--wait`` (0 too), ``--timeout``, ``--kill-after``: at most 365 days."""
    return parse_time_span(text, what, minimum=minimum, allow_zero=allow_zero, maximum=maximum)


def parse_duration(text: str, what: str, maximum: float = MAX_DURATION_S) -> float:
    """``--remember``, ``prune --older-than``: the same syntax, at most ``maximum`` (100 years)."""
    return parse_time_span(text, what, maximum=maximum)


def parse_min_hold(text: str, what: str) -> float:
    """``--min-hold``: a duration that keeps a lock taken, so no longer than a lease may be."""
    return parse_time_span(text, what, maximum=MAX_SECONDS)


_HOST_RE = re.compile(r"[^\x00-\x20\x7f]{1,255}")


def validate_host(text: str, what: str) -> str:
    """A host name to filter on: 1 to 255 printable characters, no spaces."""
    if not _HOST_RE.fullmatch(str(text)):
        raise UsageError(f"invalid {what} {quoted(text)}: expected a host name (1 to 255 printable characters,"
                         " no spaces)")
    return str(text)


_SIZE_RE = re.compile(r"([0-9]+)([kKmM]?)[bB]?")


def parse_size(text: str, what: str) -> int:
    """``512``, ``10k``, ``1m`` (powers of 1024) -> bytes, 1 byte to 16 MiB."""
    match = _SIZE_RE.fullmatch(str(text))
    size = int(match.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[match.group(2).lower()] if match else 0
    if not 0 < size <= MAX_TAIL:
        raise UsageError(f"invalid {what} {quoted(text)}: expected a size like 512, 10k or 1m (at most 16m)")
    return size


REPLICAS_RULE = f"a whole number from 0 to {MAX_REPLICAS}, or all"


def parse_replicas(text: str | int, what: str) -> int | str:
    """``--replicas``: how many Redis replicas must acknowledge the lock and each renewal.

    0 (the default) waits for none; ``all`` for every replica in sync with the master.
    """
    value = str(text).lower()
    if value == ALL_REPLICAS:
        return ALL_REPLICAS
    if not re.fullmatch(r"[0-9]{1,6}", value) or int(value) > MAX_REPLICAS:
        raise UsageError(f"invalid {what} {quoted(text)}: expected {REPLICAS_RULE}")
    return int(value)






def whole_rule(minimum: int, maximum: int) -> str:
    return f"a whole number from {minimum} to {maximum}"


def parse_whole(text: str | int, what: str, minimum: int, maximum: int) -> int:
    """A whole number in ASCII digits, from ``minimum`` to ``maximum``: ``--retry``, ``--slots``,
    ``-E``, ``--limit``, ``--width`` (click's IntRange took ``' 2'`` and ``٢``)."""
    value = str(text)
    digits = len(str(maximum))
    if not re.fullmatch(rf"[0-9]{{1,{digits}}}", value) or not minimum <= int(value) <= maximum:
        raise UsageError(f"invalid {what} {quoted(text)}: expected {whole_rule(minimum, maximum)}")
    return int(value)






SUCCESS_EXIT_RULE = f"a comma-separated list of exit codes from 1 to 255 (at most {MAX_SUCCESS_EXITS})"


def parse_success_exit(text: str | list[object], what: str) -> tuple[int, ...]:
    """``--success-exit 24`` or ``1,24`` (a config file may give a list): the codes, sorted, once each."""
    parts = [str(part) for part in text] if isinstance(text, list) else str(text).split(",")
    codes = {_exit_code(part, text, what) for part in parts}
    if not codes or len(codes) > MAX_SUCCESS_EXITS:
        raise UsageError(f"invalid {what} {quoted(text)}: expected {SUCCESS_EXIT_RULE}")
    return tuple(sorted(codes))


def _exit_code(part: str, text: str | list[object], what: str) -> int:
    if not re.fullmatch(r"[0-9]{1,3}", part) or not 1 <= int(part) <= 255:
        raise UsageError(f"invalid {what} {quoted(text)}: expected {SUCCESS_EXIT_RULE}")
    return int(part)


# What --notify-on may name: every final status a run can end in, and ``slow`` (--warn-after), an
# event while the command runs (docs/operating.md "Telling someone").
NOTIFY_STATUSES = tuple(status.value for status in FINAL_STATUSES)
SLOW_EVENT = "slow"
NOTIFY_EVENTS = (*NOTIFY_STATUSES, SLOW_EVENT)
DEFAULT_NOTIFY_ON = (
    *(status.value for status in (Status.FAILED, Status.LOST, Status.TIMEOUT, Status.UNAVAILABLE, Status.ERROR)),
    SLOW_EVENT,
)


def parse_notify_statuses(text: str, what: str) -> tuple[str, ...]:
    """``failed,lost`` -> ("failed", "lost"); every name must be a final ledger status, or ``slow``."""
    statuses = tuple(part.strip() for part in str(text).split(",") if part.strip())
    if not statuses or any(status not in NOTIFY_EVENTS for status in statuses):
        raise UsageError(f"invalid {what} {quoted(text)}: a comma-separated list of {', '.join(NOTIFY_EVENTS)}")
    return statuses


#: What ``history --status`` may name: every ledger status, and the group ``failures``.
STATUS_FILTER_NAMES = (*(status.value for status in Status), FAILURES)


def parse_status_filter(text: str, what: str) -> frozenset[str]:
    """``failed,timeout`` -> {"failed", "timeout"}; ``failures`` -> every failure status."""
    names = [part.strip() for part in str(text).split(",")]
    if not all(name in STATUS_FILTER_NAMES for name in names):
        raise UsageError(
            f"invalid {what} {quoted(text)}: expected ledger statuses, comma-separated or repeated"
            f" ({', '.join(STATUS_FILTER_NAMES[:-1])}), or {FAILURES}"
            f" ({', '.join(FAILURE_STATUSES)})"
        )
    expanded = {status for name in names for status in ([*FAILURE_STATUSES] if name == FAILURES else [name])}
    return frozenset(str(status) for status in expanded)


def redact_endpoint(url: str) -> str:
    """``https://hooks.example.com/…``: enough to tell endpoints apart, no secrets.

    A webhook's query string and a ping URL's path (the check's UUID) are its
    credentials, so neither is ever shown or stored.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparseable URL>"
    return f"{parts.scheme}://{host}{port}/…"


def validate_http_url(url: str, what: str) -> str:
    """An http(s) URL with a host; the message never shows the URL's secrets."""
    if not _URL_TEXT.fullmatch(url):  # an HTTP client cannot send it; said now, not by a thread mid-run
        raise UsageError(f"invalid {what} {quoted(redact_endpoint(url))}: a URL is printable ASCII, without"
                         " spaces (percent-encode the rest: %20)")
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(f"invalid {what} {quoted(redact_endpoint(url))}: expected an http:// or https:// URL")
    return url


#: What an HTTP request line can carry: printable ASCII, no space.
_URL_TEXT = re.compile(r"[!-~]+")


# --- paths lockrun writes ----------------------------------------------------------------

#: ``--output`` and the config file's ``output``: chronic(1)'s choice (docs/operating.md "Output").
OUTPUT_MODES = ("always", "on-failure")






def existing_file(path: str, what: str) -> str:
    """A file lockrun reads and that must be there (``--redis-ca``): a missing one is a usage
    error now, not an unreachable server (exit 69) at the first connection."""
    if not path or not Path(path).expanduser().is_file():
        raise UsageError(f"invalid {what} {quoted(path)}: no such file on this host")
    return path


def output_path_problem(path: str, what: str, directories: bool = True) -> str | None:
    """The one line refusing ``path`` as a file lockrun writes, when a device, FIFO or socket (or a
    link to one; with ``directories``, a directory) is there, checked when it is parsed; else None.
    lockrun would never write there, so saying it before the run beats a warning after it."""
    kind = special_file(Path(path).expanduser(), directories=directories)
    if kind is None:
        return None
    named = f"{what} {path}" if what else path
    return (f"{named} is {kind}, not a regular file; lockrun writes only regular files there,"
            " and never replaces anything else")


def check_output_path(path: str, what: str, directories: bool = True) -> str:
    """``--ledger``: a path :func:`output_path_problem` finds nothing wrong with."""
    problem = output_path_problem(path, what, directories=directories)
    if problem:
        raise UsageError(problem)
    return path


def metrics_file_problem(path: str, what: str, directory: bool = True) -> str | None:
    """Why a run could not write ``path`` as its ``--metrics-file`` (docs/operating.md "Metrics for
    Prometheus"), said before the command runs rather than in a warning after it: empty (a
    ``"$PROM"`` that expanded to nothing would otherwise turn metrics off without a word), a
    directory, device, FIFO or socket there, or (``directory``) a symbolic link there or a directory
    for it that does not exist or that this user cannot write (the file is replaced by a rename
    there). None when it can
    be written. A config file's value is checked without ``directory`` as the file is read (another
    user's ``status`` need not write it), and whole before a run."""
    import os

    if path == "":
        return (f"{what} is empty (a variable that expanded to nothing?): name the file, e.g."
                " /var/lib/prometheus/node-exporter/lockrun-NAME.prom, or leave the option out")
    problem = output_path_problem(path, what, directories=True)
    if problem or not directory:
        return problem
    if os.path.islink(Path(path).expanduser()):  # replaced by a rename: never through a link
        return (f"{what} {path} is a symbolic link; lockrun replaces the file by a rename and never writes"
                " through a link: name the file it points to")
    parent = Path(path).expanduser().absolute().parent
    try:
        is_dir = parent.is_dir()
    except OSError as exc:  # a name too long, a loop of links
        return f"{what} {path}: cannot look at its directory ({exc.strerror or exc})"
    if not is_dir:
        return f"{what} {path}: its directory {parent} does not exist"
    if not os.access(parent, os.W_OK | os.X_OK):
        return (f"{what} {path}: its directory {parent} is not writable by this user (the file is replaced"
                " by a rename there)")
    return None


def check_metrics_path(path: str, what: str) -> str:
    """A ``--metrics-file`` or ``metrics_file`` as it is read: not empty, nothing but a regular file
    there (where it goes is checked before a run: :func:`metrics_file_problem`)."""
    problem = metrics_file_problem(path, what, directory=False)
    if problem:
        raise UsageError(problem)
    return path


def validate_pause_reason(text: str, what: str) -> str:
    """``pause --reason``: one line of at most MAX_PAUSE_REASON printable characters."""
    from lockrun.core.defaults import MAX_PAUSE_REASON

    if len(text) > MAX_PAUSE_REASON or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        raise UsageError(f"invalid {what} {quoted(text)}: one line of at most {MAX_PAUSE_REASON} printable"
                         " characters")
    return text


def parse_schedule(text: str, what: str) -> str:
    """``--schedule``: a 5-field cron expression (``0 3 * * *``), evaluated by cronsim."""
    from lockrun.core.cadence import cron_problem

    expression = " ".join(str(text).split())
    problem = cron_problem(expression)
    if problem is not None:
        raise UsageError(f"invalid {what} {quoted(text)}: {problem}")
    return expression
