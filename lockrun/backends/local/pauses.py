"""Pauses on this host (``lockrun pause``, docs/operating.md "Pausing a job"): one private JSON file
per name beside its lock, ``locks/<name>~paused`` (``~`` is in no name's file name), replaced
atomically and never opened through a link. The acquire reads it under the lock it just took.
A pause's end is its ``until_epoch``: a file whose end has passed is no pause (it is left for
the next ``pause`` or ``resume`` to replace); one whose end cannot be read is malformed, shown and
not honoured (backends/pause.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import unquote

from lockrun.backends.local.files import HASHED, LockFiles, file_name, mode_of
from lockrun.backends.local.records import finite
from lockrun.backends.pause import Paused, PauseRequest
from lockrun.core.clock import ISO_FORMAT
from lockrun.core.errors import BackendUnavailable
from lockrun.core.readers import written_by_others
from lockrun.system.safefs import UnsafePath, open_regular, write_atomically

PAUSE_SUFFIX = "~paused"
PAUSE_FILE_LIMIT = 64 * 1024  # a pause lockrun writes is a few hundred bytes


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).strftime(ISO_FORMAT)


class LocalPauses:
    def __init__(self, files: LockFiles) -> None:
        self.files = files

    def path(self, name: str) -> Path:
        return self.files.locks_dir / (file_name(name) + PAUSE_SUFFIX)

    def pause(self, name: str, request: PauseRequest) -> Paused:
        self.files.ready()
        now = time.time()
        ends = now + request.for_s if request.for_s is not None else float(request.until_epoch_s or 0.0)
        record = {"name": name, "who": request.who, "where": request.where, "when": _iso(now), "until": _iso(ends),
                  "until_epoch": ends, "reason": request.reason}
        try:
            write_atomically(self.path(name), json.dumps(record).encode(), durable=True, in_state_dir=True)
        except OSError as exc:
            raise BackendUnavailable(f"cannot write to {self.files.locks_dir}: {exc.strerror}") from None
        return Paused.from_fields(name, record)

    def resume(self, name: str) -> bool:
        """Remove the pause file of ``name`` (whatever sits there: a malformed one too, never followed)."""
        path = self.path(name)
        mode = mode_of(path)
        if mode is None:
            return False
        try:
            os.rmdir(path) if stat.S_ISDIR(mode) else os.unlink(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise BackendUnavailable(f"cannot remove {path}: {exc.strerror}") from None
        return True

    def of(self, name: str) -> Paused | None:
        """The pause of ``name`` now: None when there is none or it has ended."""
        return self._at(self.path(name), name)

    def _at(self, path: Path, name: str | None) -> Paused | None:
        """The pause in the file at ``path``; ``name`` None: the file's own name says whose (a hashed
        long name: the name recorded inside, else the file name)."""
        if name is None:
            stem = path.name[: -len(PAUSE_SUFFIX)]
            name = None if stem.startswith(HASHED) else unquote(stem)
        try:
            fd = open_regular(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except (UnsafePath, OSError) as exc:
            return Paused(name=name or path.name, problem=written_by_others(str(exc)))
        try:
            raw = os.read(fd, PAUSE_FILE_LIMIT)
        except OSError as exc:
            return Paused(name=name or path.name, problem=f"cannot read {path}: {exc.strerror}")
        finally:
            os.close(fd)
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict):
            return Paused(name=name or path.name, problem=written_by_others(f"{path} is not a JSON object"))
        recorded = data.get("name")
        name = name or (recorded if isinstance(recorded, str) and recorded else path.name)
        ends = finite(data.get("until_epoch"))
        if ends is None:
            return Paused.from_fields(name, data, written_by_others(f"{path} names no end (until_epoch)"))
        if ends <= time.time():
            return None
        return Paused.from_fields(name, data)

    def read(self, names: list[str] | None) -> dict[str, Paused]:
        if names is not None:
            found = {name: self.of(name) for name in names}
            return {name: paused for name, paused in found.items() if paused is not None}
        entries: list[str] = []
        with contextlib.suppress(OSError):
            entries = [entry.name for entry in os.scandir(self.files.locks_dir) if entry.name.endswith(PAUSE_SUFFIX)]
        every: dict[str, Paused] = {}
        for entry in sorted(entries):
            paused = self._at(self.files.locks_dir / entry, None)
            if paused is not None:
                every[paused.name] = paused
        return every
