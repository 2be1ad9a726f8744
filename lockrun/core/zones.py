"""The time zone of a name's ``--once`` periods (docs/guarantees.md "One zone per name").

``--once-per day`` keys a run by the day it starts in, and a day starts at another moment in
every zone: two hosts in different zones would compute different keys at the same instant,
and both would run. So the zone is a setting (``--tz``, ``LOCKRUN_TZ``, ``timezone``), the
acquire records it with the name, and a run in another zone is refused.

A zone is named, never described by its offset: ``Asia/Jakarta``, not ``+07``. Two names of one
zone must compare equal on every host, so names are made canonical: the link the tz database
or the file system makes from an alias to its zone (``US/Eastern`` is ``America/New_York``), and
every name of UTC (``UTC``, ``Etc/UTC``, ``Zulu``, ``GMT``, ...) is ``UTC``. The host's local zone
is named from ``TZ``, else the link ``/etc/localtime``, else the zone file with its contents.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Iterator
from datetime import datetime, tzinfo
from pathlib import Path
from typing import NamedTuple

from lockrun.core.errors import UsageError
from lockrun.core.printable import quoted

ZONE_RULE = "an IANA time zone name such as UTC, Europe/Berlin or Asia/Jakarta"
#: The longest IANA name has 32 characters (America/Argentina/ComodRivadavia).
MAX_ZONE_NAME = 64
_ZONE_RE = re.compile(r"[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*")
# Names in the zone directory that are this host's choice, not a zone (Debian links
# /usr/share/zoneinfo/localtime to /etc/localtime).
_NOT_ZONES = ("localtime", "posixrules")
# The tz database's two copies of every zone: ``posix/X`` is ``X`` itself, and ``right/X`` is
# ``X`` with leap seconds counted in its clock. A period key is a civil date or hour, the same in
# both except during a leap second itself, and Python reads the POSIX time lockrun keys by: both
# are ``X``, so that hosts naming one zone either way agree.
_VARIANT_DIRS = ("posix/", "right/")
# Every name of UTC, and of GMT, which has the same offset (zero) for ever: periods agree.
UTC = "UTC"
_UTC_NAMES = frozenset({
    "UTC", "UCT", "Universal", "Zulu", "Etc/UTC", "Etc/UCT", "Etc/Universal", "Etc/Zulu",
    "GMT", "GMT0", "GMT+0", "GMT-0", "Greenwich", "Etc/GMT", "Etc/GMT0", "Etc/GMT+0", "Etc/GMT-0", "Etc/Greenwich",
})
# A POSIX TZ string for UTC itself (TZ=UTC0): the same zone, without a file.
_UTC_POSIX = re.compile(r"(UTC|UCT|GMT)([+-]?0{1,2}(:00){0,2})?")
LOCALTIME = Path("/etc/localtime")
DEBIAN_TIMEZONE = Path("/etc/timezone")


class Zone(NamedTuple):
    """A zone as a run uses it: its canonical name, the zone, and where the setting came from."""

    name: str
    tz: tzinfo
    source: str  # "--tz", "LOCKRUN_TZ", "timezone in FILE" or "the host's local zone"


def _zoneinfo_roots() -> tuple[str, ...]:
    import zoneinfo

    return tuple(zoneinfo.TZPATH)


def _without_variant(name: str) -> str:
    """``Asia/Jakarta`` for ``posix/Asia/Jakarta`` and ``right/Asia/Jakarta`` (see _VARIANT_DIRS)."""
    while name.startswith(_VARIANT_DIRS):
        name = name.split("/", 1)[1]
    return name


def _relative_to_a_root(path: str) -> str | None:
    """``Asia/Jakarta`` for ``/usr/share/zoneinfo/Asia/Jakarta`` (links followed), else None."""
    real = os.path.realpath(path)
    for root in _zoneinfo_roots():
        real_root = os.path.realpath(root)
        if real.startswith(real_root + os.sep):
            return _without_variant(real[len(real_root) + 1:])
    return None


@functools.lru_cache(maxsize=1)
def _database_links() -> dict[str, str]:
    """The tz database's aliases (``L ZONE ALIAS`` lines of ``tzdata.zi``), where one is installed."""
    for root in _zoneinfo_roots():
        try:
            text = (Path(root) / "tzdata.zi").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        links = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "L":
                links[parts[2]] = parts[1]
        return links
    return {}


def canonical(name: str) -> str:
    """The one name every host gives this zone: aliases resolved, ``posix/`` and ``right/`` dropped,
    every name of UTC ``UTC``."""
    name = _without_variant(name)
    if name in _UTC_NAMES:
        return UTC
    name = _link_target(name)
    name = _database_links().get(name, name)
    return UTC if name in _UTC_NAMES else name


def _link_target(name: str) -> str:
    """The zone the file system links ``name`` to, in the first zone directory that has it; else ``name``."""
    for root in _zoneinfo_roots():
        path = os.path.join(root, name)
        if os.path.islink(path):
            resolved = _relative_to_a_root(path)
            return resolved if resolved and _ZONE_RE.fullmatch(resolved) else name
        if os.path.lexists(path):
            break
    return name


def _load(name: str) -> tzinfo | None:
    import zoneinfo

    if len(name) > MAX_ZONE_NAME or not _ZONE_RE.fullmatch(name):
        return None
    name = _without_variant(name)
    if name in _NOT_ZONES:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):  # not a zone, not a TZif file, a directory
        return None


def parse_zone(text: str, what: str, source: str | None = None) -> Zone:
    """``--tz``, ``LOCKRUN_TZ`` or ``timezone``: an IANA name, made canonical. UsageError if it is none."""
    name = str(text).strip()
    zone = _load(name)
    if zone is None:
        raise UsageError(f"unknown time zone {quoted(text, MAX_ZONE_NAME)}: expected {ZONE_RULE}"
                         " (as in /usr/share/zoneinfo)")
    named = canonical(name)
    return Zone(named, _load(named) or zone, source or what)


def recorded_zone(raw: bytes | str | None) -> str | None:
    """A zone record read back (Redis ``once_tz``, the local ``~zone``): its name when it is one
    lockrun could have written (an IANA zone this host knows, at most MAX_ZONE_NAME bytes), else None."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("ascii")
        except UnicodeDecodeError:
            return None
    if not raw or len(raw) > MAX_ZONE_NAME or _load(raw) is None:
        return None
    return raw


def shown_record(raw: bytes | str | None, size: int | None = None) -> str:
    """A record that is not lockrun's, for a message of one line: cut, non-printables escaped."""
    from lockrun.core.printable import printable

    if raw is None:
        return "nothing"
    text = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
    size = len(raw) if size is None else size
    if size == 0:
        return "empty"
    shown = "'" + printable(text[:MAX_ZONE_NAME]) + "'"
    return f"{shown}... ({size} bytes)" if size > MAX_ZONE_NAME else shown


def _same_contents(a: Path, b: Path) -> bool:
    try:
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def _zone_with_contents(data: bytes) -> str | None:
    """The zone whose file holds exactly ``data`` (``/etc/localtime`` copied, not linked), as
    ``timedatectl`` and tzlocal find it; the first canonical name in order when several do."""
    for root in _zoneinfo_roots():
        found = {canonical(name) for path, name in _zone_files(root) if _holds(path, data) and _load(name) is not None}
        if found:
            return min(found)
    return None


def _zone_files(root: str) -> Iterator[tuple[str, str]]:
    """Each file under a zone directory, as its path and its name there; ``posix/`` and
    ``right/`` left out (see _VARIANT_DIRS)."""
    for folder, dirs, files in os.walk(root):
        relative = os.path.relpath(folder, root)
        if relative.split(os.sep)[0] + "/" in _VARIANT_DIRS:
            dirs[:] = []
            continue
        for file in files:
            yield os.path.join(folder, file), os.path.normpath(os.path.join(relative, file))


def _holds(path: str, data: bytes) -> bool:
    try:
        return os.path.getsize(path) == len(data) and Path(path).read_bytes() == data
    except OSError:
        return False


def _cannot_name(why: str) -> UsageError:
    return UsageError(f"cannot name this host's local time zone ({why}); --once periods need one: give --tz ZONE "
                      f"(or LOCKRUN_TZ, or timezone in the config file), {ZONE_RULE}")


def local_zone() -> Zone:
    """The host's local zone, by name: what ``TZ`` says (glibc: empty is UTC), else what
    ``/etc/localtime`` links to (no such file: UTC), else the zone file with its contents."""
    source = "the host's local zone"
    tz = os.environ.get("TZ")
    zone = None if tz is None else _zone_in_tz(tz, source)
    if zone is not None:
        return zone
    if not os.path.lexists(LOCALTIME):
        return Zone(UTC, _utc(), f"{source}, no {LOCALTIME}")
    if os.path.islink(LOCALTIME):
        return _zone_linked(source)
    zone = _zone_named_by_debian(source)
    return _zone_copied(source) if zone is None else zone


def _zone_in_tz(tz: str, source: str) -> Zone | None:
    """The zone ``TZ`` names (a POSIX UTC, a zone name or a zone file), or None when it names
    ``/etc/localtime`` itself: the host's zone, as without ``TZ``."""
    spec = tz[1:] if tz.startswith(":") else tz
    if not spec or _UTC_POSIX.fullmatch(spec):
        return Zone(UTC, _utc(), f"{source}, TZ={tz}")
    if not spec.startswith("/"):
        if _load(spec) is None:
            raise _cannot_name(f"TZ={quoted(tz, 80)} is not an IANA zone name")
        return parse_zone(spec, "TZ", f"{source}, TZ={tz}")
    return _zone_file_in_tz(tz, spec, source)


def _zone_file_in_tz(tz: str, path: str, source: str) -> Zone | None:
    """``TZ=/usr/share/zoneinfo/ZONE`` (or ``:`` and it): that zone; None for ``/etc/localtime``."""
    if os.path.realpath(path) == os.path.realpath(LOCALTIME):
        return None
    name = _relative_to_a_root(path)
    if name is None or _load(name) is None:
        raise _cannot_name(f"TZ={quoted(tz, 80)} is no IANA zone file of the zone directory")
    return parse_zone(name, "TZ", f"{source}, TZ={tz}")


def _zone_linked(source: str) -> Zone:
    """The zone ``/etc/localtime`` links to."""
    name = _relative_to_a_root(str(LOCALTIME))
    if name is None or _load(name) is None:
        raise _cannot_name(f"{LOCALTIME} links to {os.path.realpath(LOCALTIME)}, outside the zone directory")
    return parse_zone(name, "zone", source)


def _zone_named_by_debian(source: str) -> Zone | None:
    """The zone ``/etc/timezone`` names, if ``/etc/localtime`` is a copy of its file; else None."""
    try:
        named = DEBIAN_TIMEZONE.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0].strip()
    except OSError:
        named = ""
    zone = _load(named)
    if zone is not None and any(_same_contents(Path(root) / named, LOCALTIME) for root in _zoneinfo_roots()):
        return parse_zone(named, "zone", source)
    return None


def _zone_copied(source: str) -> Zone:
    """The zone whose file ``/etc/localtime`` is a copy of."""
    try:
        data = LOCALTIME.read_bytes()
    except OSError as exc:
        raise _cannot_name(f"{LOCALTIME}: {exc.strerror or exc}") from None
    found = _zone_with_contents(data)
    if found is None:
        raise _cannot_name(f"{LOCALTIME} is a copy of no zone in the zone directory")
    return parse_zone(found, "zone", source)


def _utc() -> tzinfo:
    from datetime import timezone

    return timezone.utc


def is_time_derived(template: str) -> bool:
    """Whether a ``--once`` template has a strftime conversion (``%%`` is a literal ``%``)."""
    return "%" in template.replace("%%", "")


def strftime(template: str, zone: Zone | None, now: float | None = None) -> str:
    """``template`` expanded at ``now`` in ``zone`` (None: the process's local time, as cron does)."""
    if zone is None:
        return time.strftime(template, time.localtime(now))
    return datetime.fromtimestamp(time.time() if now is None else now, zone.tz).strftime(template)
