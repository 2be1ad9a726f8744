"""The command's output under ``--capture-tail``: passed through as it comes, its end kept.

Without ``--capture-tail`` the command inherits lockrun's stdout and stderr and none of
this runs, unless lockrun keeps a failed run's tail by default (its output is not a terminal:
docs/operating.md "Output") or ``--output on-failure`` holds the output back (:class:`OutputSpool`).
With it, the command writes into pipes; one thread copies them to lockrun's
own descriptors and keeps the last bytes for the ledger, webhooks and pings. What the
command would have seen without lockrun is kept: a stream lockrun was started without
stays closed, two that are one destination stay one pipe (their order is exact), and a
destination that is gone makes the command's next write fail with EPIPE.

A destination that fails otherwise (a full disk, ``>/dev/full``; a descriptor opened
read-only, EBADF) is treated the same way, since the command cannot be handed that error
itself: its pipe is closed, so its next write there fails with EPIPE (SIGPIPE, exit 141,
unless it handles that), much as the write would have failed without lockrun. Unlike a
reader that went away, that is worth saying: one line on lockrun's stderr (when stderr is
not the stream that failed) and a note on the run's ledger row, so output is never dropped
silently.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import select
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterator

from lockrun.system.own_output import inherited

# How long the pump may wait for more input after the command's group is gone: the pipes are at
# EOF then, unless a process that left the group still holds them. Time spent waiting for a
# destination to take output does not count (see Pump.drain).
PUMP_DRAIN_S = 2.0
#: How often drain() looks at the pump while it waits.
PUMP_DRAIN_LOOK_S = 0.05


class OutputTail:
    """The last ``size`` bytes of the command's combined output, in arrival order."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._chunks: collections.deque[bytes] = collections.deque()
        self._length = 0
        self._lock = threading.Lock()
        #: Streams the command's output could not be passed on to, and why (for the row's note).
        self.lost: list[str] = []

    def feed(self, data: bytes) -> None:
        with self._lock:
            self._chunks.append(data)
            self._length += len(data)
            while self._length - len(self._chunks[0]) >= self.size:
                self._length -= len(self._chunks.popleft())

    def text(self) -> str:
        with self._lock:
            data = b"".join(self._chunks)[-self.size :]
        return data.decode("utf-8", "replace")


# With both pipes ready, read at most this much from each in turn: a burst on one stream cannot
# hold back what the other wrote meanwhile. One pipe ready alone (one pipe, or a flood on stdout
# while stderr is quiet: `2>/dev/null`) has no order to keep against the other: a whole pipe's
# worth then, or the pump costs five times the CPU (docs/operating.md "Output tail").
PUMP_READ_SIZE = 1024
PUMP_READ_SIZE_ONE_PIPE = 65536


def same_destination(fd_a: int, fd_b: int) -> bool:
    """True when writes to the two descriptors land in one stream: the same pipe, socket or
    terminal (cron gives a job one pipe for both), or the same file at the same offset
    (``>> log 2>&1``). The command then gets one pipe for both, and its output keeps its exact order."""
    try:
        a, b = os.fstat(fd_a), os.fstat(fd_b)
    except OSError:
        return False
    if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
        return False
    if _a_stream(a.st_mode):
        return True
    return stat.S_ISREG(a.st_mode) and _same_offset(fd_a, fd_b)


def _a_stream(mode: int) -> bool:
    """A pipe, a socket or a terminal: one stream, whoever writes to it."""
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


def _same_offset(fd_a: int, fd_b: int) -> bool:
    try:
        return os.lseek(fd_a, 0, os.SEEK_CUR) == os.lseek(fd_b, 0, os.SEEK_CUR)
    except OSError:
        return False


def output_pipes() -> tuple[list[tuple[int, int]], tuple[int | None, int | None]]:
    """Pipes for the command's stdout and stderr: the routes (read end, lockrun's descriptor)
    for the :class:`Pump`, and the write ends the command gets as fd 1 and 2 (None: closed)."""
    routes: list[tuple[int, int]] = []
    # A stream lockrun was started without stays closed for the command, as without
    # --capture-tail; two that are one destination share one pipe, which keeps their order.
    if inherited(1) and inherited(2) and same_destination(1, 2):
        read_end, write_end = os.pipe()
        routes.append((read_end, 1))
        return routes, (write_end, write_end)
    ends: list[int | None] = [None, None]
    for index, target in enumerate((1, 2)):
        if inherited(target):
            read_end, ends[index] = os.pipe()
            routes.append((read_end, target))
    return routes, (ends[0], ends[1])


def output_is_shared(routes: dict[int, int]) -> bool:
    """Whether the command got one pipe for stdout and stderr (see :func:`output_pipes`)."""
    return len(routes) == 1 and inherited(1) and inherited(2) and same_destination(1, 2)


def _write_through(fd: int, data: bytes) -> None:
    """Write everything, waiting (not spinning) when ``fd`` is non-blocking and full; raises
    OSError when the destination is gone."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [], 1.0)


def say_lost(target: int, exc: OSError, shared: bool, then: str) -> str:
    """A destination of the command's output failed (not a reader that went away): one line on
    lockrun's stderr unless that is what failed, saying ``then`` (what happens to the rest), and the
    problem returned for the row's note, so that output is never dropped silently."""
    stream = "standard output and error" if shared else ("standard output" if target == 1 else "standard error")
    problem = f"the command's {stream} could not be written ({exc.strerror or exc})"
    if target != 2 and not shared and inherited(2):  # else stderr is what failed, or lockrun has none
        line = f"lockrun: {problem}; {then}\n"
        with contextlib.suppress(OSError):  # stderr failed too: the ledger note remains
            _write_through(2, line.encode("utf-8", "backslashreplace"))
    return problem


class Pump:
    """Copies the command's output pipes to lockrun's own descriptors, keeping a tail.

    One thread polls every pipe and reads a little from each that is ready in turn, so the
    tail and two destinations that end up in one place (a terminal, a log) see the writes in the
    order they reached lockrun; within one pipe the order is always exact. When a destination is
    gone (``| head -1`` exited), its pipe is closed, so the command's next write to it fails with
    EPIPE/SIGPIPE exactly as it would without ``--capture-tail``.
    """

    def __init__(self, routes: list[tuple[int, int]], tail: OutputTail, spool: OutputSpool | None = None) -> None:
        self.routes = dict(routes)  # pipe read end -> lockrun's descriptor
        self.tail = tail
        self.spool = spool  # --output on-failure: chunks are kept there, not written through
        self.writing = False  # in a write to a destination (which may be waiting for its reader)
        if spool is not None:
            spool.shared = output_is_shared(self.routes)
        self._thread = threading.Thread(target=self._run, name="lockrun-pump", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = select.poll()
        for source in self.routes:
            poller.register(source, select.POLLIN)
        open_sources = dict(self.routes)
        try:
            while open_sources:
                ready = poller.poll()
                read_size = PUMP_READ_SIZE_ONE_PIPE if len(ready) == 1 else PUMP_READ_SIZE
                for source, _events in ready:
                    target = open_sources.get(source)
                    if target is None or self._pass_on(source, target, read_size):
                        continue
                    poller.unregister(source)
                    del open_sources[source]
                    os.close(source)
        finally:
            for source in open_sources:
                os.close(source)

    def _pass_on(self, source: int, target: int, read_size: int) -> bool:
        """One read of ``source`` passed on to ``target`` (or kept in the spool); False once the
        pipe is done with: its end, a read that failed, or a destination that did."""
        try:
            chunk = os.read(source, read_size)
        except OSError:
            chunk = b""
        if not chunk:
            return False
        self.tail.feed(chunk)
        if self.spool is not None and self.spool.keep(target, chunk):
            return True
        self.writing = True
        try:
            _write_through(target, chunk)
            return True
        except OSError as exc:
            if exc.errno != errno.EPIPE:  # a reader that went away is no news
                self._say_lost(target, exc)
            # our own output is gone: let the command find out, as on a closed pipe
            return False
        finally:
            self.writing = False

    def _say_lost(self, target: int, exc: OSError) -> None:
        """Once per stream (its pipe closes now): the note, and one line on stderr if it works."""
        self.tail.lost.append(say_lost(target, exc, output_is_shared(self.routes),
                                       "its further writes there fail as on a closed pipe"))

    def drain(self, until: float | None = None, interrupted: Callable[[], bool] = lambda: False) -> None:
        """Wait for what the command wrote last to be passed on. Waiting for input ends after
        PUMP_DRAIN_S (only a process that left the group can still hold the pipes); waiting for a
        destination to take it (a reader that starts late: cron's mailer, an ssh) goes on, as the
        command itself would have waited, until ``until`` (monotonic; the run's --timeout, after
        which the command would have been killed) or ``interrupted()`` (a signal to lockrun)."""
        idle_until = time.monotonic() + PUMP_DRAIN_S
        while self._thread.is_alive():
            self._thread.join(PUMP_DRAIN_LOOK_S)
            now = time.monotonic()
            if self.writing:
                idle_until = now + PUMP_DRAIN_S
            if now >= idle_until or (until is not None and now >= until) or interrupted():
                return


# --- --output on-failure (chronic(1)) ------------------------------------------------------------

#: A kept chunk in the spool file: the descriptor it was for (1 or 2) and its length, then its bytes.
_FRAME = struct.Struct("=BI")
#: How much of the spool file is read back at a time when it is written out.
_REPLAY_READ = 65536


def _open_spool_file() -> int:
    """A private (0600) file in $TMPDIR (else /tmp) that has no name: an O_TMPFILE, else one made
    with O_EXCL (never through a link) and unlinked at once. The kernel removes it when lockrun's
    descriptor closes, however lockrun ends (a signal, SIGKILL): nothing is left behind."""
    import tempfile  # only --output on-failure pays for it

    directory = tempfile.gettempdir()
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile:
        try:
            return os.open(directory, tmpfile | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError:
            pass  # a file system without O_TMPFILE: a named file, unlinked at once
    fd, path = tempfile.mkstemp(prefix="lockrun-output-", dir=directory)
    os.unlink(path)
    return fd


class OutputSpool:
    """``--output on-failure``: the command's stdout and stderr kept, in the order lockrun read them,
    in a private file, and written out only for a run that did not succeed (docs/operating.md
    "Output"): with --retry, each failed attempt's output under a one-line header, and nothing at
    all when a later attempt succeeds.

    The pump (its own thread) calls :meth:`keep` for each chunk; once the command's whole group is
    gone and the pump has drained, the run loop calls :meth:`mark_attempt` for a failed --retry
    attempt (its output stays kept, under its header), and :meth:`settle` when the run is over:
    ``settle(failed=True)`` writes out what was kept, ``settle(failed=False)`` drops it, and either
    way the file is empty again.

    Nothing is lost: when the file cannot be written (a full disk, a file size limit), what it
    holds is written out at once, in order, and from then on output passes through as it comes;
    ``warn`` gets one line saying so.
    """

    def __init__(self, warn: Callable[[str], None]) -> None:
        self._warn = warn
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._kept = 0  # bytes of whole frames in the file: what a failed write is cut back to
        self._attempt_start = 0  # where the current --retry attempt's frames begin
        self._headers: list[tuple[int, bytes]] = []  # (frame offset, header line) of failed attempts
        self.passing_through = False  # the file failed (or could not be made): output goes straight out
        self.shared = False  # stdout and stderr are one pipe (the pump says so): for what lost says
        #: Destinations the held output could not be written out to, and why (for the row's note).
        self.lost: list[str] = []
        try:
            self._fd = _open_spool_file()
        except OSError as exc:
            import tempfile

            self._give_up(f"cannot create a temporary file in {tempfile.gettempdir()} ({exc.strerror or exc})")

    def keep(self, target: int, chunk: bytes) -> bool:
        """Keep ``chunk`` (written to ``target``); False when it must be written through instead."""
        with self._lock:
            if self.passing_through or self._fd is None:
                return False
            try:
                _write_through(self._fd, _FRAME.pack(target, len(chunk)) + chunk)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self._kept)  # the frame that did not fit is written through
                self._replay()
                self._give_up(f"cannot keep the command's output in a temporary file ({exc.strerror or exc})")
                return False
            self._kept += _FRAME.size + len(chunk)
            return True

    def mark_attempt(self, header: str) -> None:
        """A --retry attempt failed (its output drained): keep its output, to be written out under
        the one-line ``header`` (on stderr) if the run ends without a success. An attempt that
        printed nothing gets no header either."""
        with self._lock:
            self._mark(header)

    def settle(self, failed: bool, header: str | None = None) -> None:
        """The run is over (its output drained): write out what was kept if it ``failed`` (the last
        attempt under ``header``, if given), else drop it."""
        with self._lock:
            if not failed:
                self._empty()
                return
            if header is not None:
                self._mark(header)
            self._replay()

    def _mark(self, header: str) -> None:
        if self._kept > self._attempt_start:
            self._headers.append((self._attempt_start, header.rstrip("\n").encode("utf-8", "backslashreplace") + b"\n"))
        self._attempt_start = self._kept

    def close(self) -> None:
        """Done with the file; output no attempt settled (lockrun failed mid-run) is written out."""
        with self._lock:
            if self._kept:
                self._replay()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _replay(self) -> None:
        """Write every kept chunk to its descriptor, in order, then empty the file. A destination
        that fails is skipped from then on (its failure is the same lockrun would have met writing
        the chunk as it came)."""
        if self._fd is None:
            return
        failed_targets: set[int] = set()
        headers = list(self._headers)
        header_target = 2 if inherited(2) else 1
        for position, target, chunk in self._frames(self._fd):
            while headers and headers[0][0] <= position:  # a failed attempt's output begins here
                with contextlib.suppress(OSError):
                    _write_through(header_target, headers.pop(0)[1])
            if target not in failed_targets and not self._write_out(target, chunk):
                failed_targets.add(target)
        self._empty()

    def _frames(self, fd: int) -> Iterator[tuple[int, int, bytes]]:
        """Each kept frame, in order: its offset in the file, its descriptor and its chunk (a read
        that fails ends them)."""
        pending = b""
        offset = 0
        position = 0  # the file offset of the frame at the head of ``pending``
        while offset < self._kept:
            try:
                data = os.pread(fd, min(_REPLAY_READ, self._kept - offset), offset)
            except OSError:
                break
            if not data:
                break
            offset += len(data)
            pending += data
            while len(pending) >= _FRAME.size:
                target, length = _FRAME.unpack_from(pending)
                if len(pending) < _FRAME.size + length:
                    break
                chunk, pending = pending[_FRAME.size:_FRAME.size + length], pending[_FRAME.size + length:]
                yield position, target, chunk
                position += _FRAME.size + length

    def _write_out(self, target: int, chunk: bytes) -> bool:
        """A kept chunk written to its descriptor; False if that failed."""
        try:
            _write_through(target, chunk)
        except OSError as exc:
            if exc.errno != errno.EPIPE:  # a reader that went away is no news, as in the pump
                self.lost.append(say_lost(target, exc, self.shared, "the output held for it is lost"))
            return False
        return True

    def _empty(self) -> None:
        """Empty the file for the next attempt; its next frame is written at its start again."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
                os.lseek(self._fd, 0, os.SEEK_SET)
        self._kept = 0
        self._attempt_start = 0
        self._headers = []

    def _give_up(self, why: str) -> None:
        self.passing_through = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._warn(f"--output on-failure: {why}; the command's output passes through from now on")
