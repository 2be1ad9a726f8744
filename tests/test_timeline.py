"""`lockrun timeline`: runs on a time axis, as text (letters without colour) and as SVG.

Rows at known times are written through the ledger's own API; real runs come from real lockrun
processes. The charts are read back from `lockrun timeline` itself, a real subprocess, with a
fixed width and no colour (stdout is a pipe), and every bar's first and last column is checked.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import uuid
import xml.etree.ElementTree as ElementTree
from datetime import datetime, timedelta, timezone

import pytest

from lockrun.core.clock import ISO_FORMAT
from lockrun.core.errors import UsageError
from lockrun.ledger.file import MIGRATIONS, SCHEMA_VERSION
from lockrun.ledger.store import Ledger, RunRecord
from lockrun.render import timeline_text as render_timeline
from lockrun.render.tables import exit_text
from lockrun.system import host as this_host
from lockrun.views import timeline as tl
from lockrun.views.timeline_rows import lanes_from_rows
from lockrun.views.timeline_window import parse_moment
from tests.conftest import history, lockrun_argv, run_lockrun, spawn_lockrun, wait_until

SVG = "{http://www.w3.org/2000/svg}"
UNTIL = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)  # the known-times window: 00:00 to 12:00 UTC
FIGURES = len(" runs fail skip  median     max  last       ")  # 44
WIDTH72 = 72 + 9 + 4 + FIGURES  # 72 columns of time (the name column is at least 9 wide: "  overlap")


@pytest.fixture
def tenv(local_env):
    """Timeline output is compared character by character: UTC labels, no colour."""
    env = {k: v for k, v in local_env.items() if k not in ("FORCE_COLOR", "COLUMNS")}
    env.update(TZ="UTC", NO_COLOR="1")
    return env


def at(hour: int, minute: int = 0, day: int = 30) -> datetime:
    return datetime(2026, 11, day, hour, minute, tzinfo=timezone.utc)


def stamp(moment: datetime) -> str:
    return moment.strftime(ISO_FORMAT)


def ledger_of(env) -> Ledger:
    return Ledger(os.path.join(env["LOCKRUN_STATE_DIR"], "ledger.db")).open()


def record(book: Ledger, name: str, start: datetime, end: datetime | None, status: str, *, code: int | None = 0,
           host: str | None = None, pid: int | None = None, pid_start: int | None = None) -> str:
    """A run at a known time, through the ledger's own API (start, then finish)."""
    run_id = uuid.uuid4().hex
    book.start(RunRecord(run_id, name, ["job", name], "local", stamp(start), host=host, pid=pid,
                         pid_start=pid_start))
    if end is not None:
        book.finish(run_id, status=status, ended_at=stamp(end), duration_s=(end - start).total_seconds(),
                    exit_code=code if status != "busy" else None)
    return run_id


def timeline(env, *args: str) -> subprocess.CompletedProcess:
    return run_lockrun(env, "timeline", *args)


def parse(output: str) -> dict:
    """{label: [(cells, figures), ...]}: a lane's rows, its overlap rows after it."""
    lanes: dict[str, list[tuple[str, list[str]]]] = {}
    current = None
    for line in output.splitlines():
        if line.count("|") != 2 or line.lstrip().startswith("+"):
            continue
        label, cells, figures = line.split("|")
        if label.strip() == "overlap":
            lanes[current].append((cells, figures.split()))
        else:
            current = label.strip()
            lanes[current] = [(cells, figures.split())]
    return lanes


def extent(cells: str, letter: str) -> tuple[int, int]:
    """The first and last column holding ``letter``."""
    columns = [i for i, c in enumerate(cells) if c == letter]
    assert columns, f"no {letter!r} in {cells!r}"
    return columns[0], columns[-1]


# --- a day whose times the test chose ---------------------------------------------------------------------


@pytest.fixture
def known_day(tenv):
    """00:00-12:00 UTC on 2026-11-30, 72 columns of 10 minutes (names are 5 letters long)."""
    book = ledger_of(tenv)
    record(book, "alpha", at(1), at(1, 25), "succeeded")  # columns 6..8
    record(book, "alpha", at(1, 10), at(1, 10), "busy", code=None)  # under alpha's bar: hidden, counted
    record(book, "alpha", at(3, 5), at(3, 6), "failed", code=3)  # column 18
    record(book, "alpha", at(5), at(5), "unavailable", code=None)  # no length, on a boundary: column 30
    record(book, "alpha", at(7), at(7), "busy", code=None)  # a faint mark in column 42
    record(book, "beta_", at(2), at(4), "timeout", code=None)  # 12..23: ends where column 24 begins
    record(book, "beta_", at(3), at(3, 20), "succeeded")  # overlaps the timeout: a second row, 18..19
    record(book, "gamma", at(23, day=29), at(0, 35), "killed", code=None)  # began before the window: 0..3
    record(book, "gamma", at(22, day=29), at(22, 30, day=29), "failed")  # ended before the window: left out
    record(book, "gamma", at(12, 30), at(12, 40), "failed")  # after the window: left out
    record(book, "delta", at(11, 50), None, "running", pid=os.getpid(), pid_start=this_host.process_start(os.getpid()))
    dead = subprocess.Popen(["true"])
    dead.wait()
    record(book, "delta", at(9), None, "running", pid=dead.pid, pid_start=1)  # its lockrun is gone: abandoned
    record(book, "epsil", at(6), at(6, 2), "succeeded")  # two runs in column 36: the worse one shows
    record(book, "epsil", at(6, 5), at(6, 7), "failed", code=1)
    book.close()
    return tenv


def test_bars_stand_where_their_runs_ran(known_day):
    result = timeline(known_day, "--until", "2026-11-30T12:00Z", "--since", "12h", "--width", str(WIDTH72))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lanes = parse(result.stdout)
    assert list(lanes) == ["alpha", "beta_", "delta", "epsil", "gamma"]
    for rows in lanes.values():
        assert all(len(cells) == 72 for cells, _ in rows)
    alpha = lanes["alpha"][0][0]
    assert extent(alpha, "S") == (6, 8)
    assert extent(alpha, "F") == (18, 18)
    assert extent(alpha, "U") == (30, 30)
    assert extent(alpha, ".") == (42, 42)  # the busy skip at 01:10 hides under the bar
    assert alpha.count(" ") == 72 - 3 - 1 - 1 - 1
    (beta, _), (beta_overlap, _) = lanes["beta_"]
    assert extent(beta, "T") == (12, 23) and beta.strip() == "T" * 12
    assert extent(beta_overlap, "S") == (18, 19) and beta_overlap.strip() == "SS"
    gamma = lanes["gamma"][0][0]
    assert extent(gamma, "K") == (0, 3) and gamma.strip() == "KKKK"
    delta = lanes["delta"][0][0]
    assert extent(delta, "A") == (54, 54)
    assert extent(delta, "R") == (71, 71)  # running: drawn to now, clipped at the window's end
    epsil = lanes["epsil"][0][0]
    assert epsil.strip() == "F" and extent(epsil, "F") == (36, 36)


def test_each_row_ends_with_its_figures(known_day):
    result = timeline(known_day, "--until", "2026-11-30T12:00Z", "--since", "12h", "--width", "140")
    lanes = parse(result.stdout)
    figures = {label: rows[0][1] for label, rows in lanes.items()}
    # runs, failures, skips, median, max, last status
    assert figures["alpha"] == ["3", "2", "2", "1.0m", "25.0m", "unavailable"]  # durations 0, 60, 1500 s
    assert figures["beta_"] == ["2", "1", "0", "1.2h", "2.0h", "succeeded"]  # 7200 and 1200 s: median 4200
    assert figures["gamma"] == ["1", "1", "0", "1.6h", "1.6h", "killed"]
    assert figures["delta"] == ["2", "1", "0", "-", "-", "running"]
    assert figures["epsil"] == ["2", "1", "0", "2.0m", "2.0m", "failed"]
    assert [rows[1][1] for rows in lanes.values() if len(rows) > 1] == [[]]  # overlap rows carry no figures
    header = result.stdout.splitlines()[1].split()
    assert header[-6:] == ["runs", "fail", "skip", "median", "max", "last"]


def test_the_axis_and_the_legend(known_day):
    result = timeline(known_day, "--until", "2026-11-30T12:00Z", "--since", "12h", "--width", str(WIDTH72))
    lines = result.stdout.splitlines()
    assert lines[0] == "runs from 2026-11-30 00:00 to 12:00 UTC, 10m per column"
    axis, ruler = lines[1], lines[2]
    origin = ruler.index("+") + 1  # the ruler's first "+" is the frame, one column left of column 0
    ticks = {m.start() - origin: m.group() for m in re.finditer(r"\S+", axis[:origin + 72])}
    assert ticks == {0: "Mon", 4: "30", 12: "02:00", 24: "04:00", 36: "06:00", 48: "08:00", 60: "10:00"}
    assert [i - origin for i, c in enumerate(ruler) if c == "+"][1:-1] == [0, 12, 24, 36, 48, 60]
    legend = " ".join(lines[lines.index("") + 1:])
    for entry in ("S succeeded", "F failed", "T timeout", "L lost/preempted", "K killed", "R running",
                  "A abandoned", "E error", "U unavailable", ". busy/skipped"):
        assert entry in legend


def test_ticks_are_in_local_time(known_day):
    env = {**known_day, "TZ": "Asia/Kolkata"}  # UTC+05:30: local hours fall on half past UTC
    result = timeline(env, "--until", "2026-11-30T12:00Z", "--since", "12h", "--width", str(WIDTH72))
    lines = result.stdout.splitlines()
    assert lines[0] == "runs from 2026-11-30 05:30 to 17:30 IST, 10m per column"
    origin = lines[2].index("+") + 1
    ticks = {m.start() - origin: m.group() for m in re.finditer(r"\S+", lines[1][:origin + 72])}
    assert ticks == {3: "06:00", 15: "08:00", 27: "10:00", 39: "12:00", 51: "14:00", 63: "16:00"}


def test_a_week_is_labelled_by_day(known_day):
    result = timeline(known_day, "--until", "2026-12-01", "--since", "7d", "--width", "120")
    lines = result.stdout.splitlines()
    labels = lines[1].split()[:-6]
    assert labels == ["Tue", "24", "Wed", "25", "Thu", "26", "Fri", "27", "Sat", "28", "Sun", "29", "Mon", "30"]
    assert "alpha" in parse(result.stdout)


def test_host_filter_and_one_row_per_host(tenv):
    book = ledger_of(tenv)
    record(book, "sync", at(1), at(1, 30), "succeeded", host="app-1")
    record(book, "sync", at(2), at(2, 30), "failed", host="app-2")
    record(book, "sync", at(4), at(4), "busy", code=None, host="app-2")
    book.close()
    window = ("--until", "2026-11-30T12:00Z", "--since", "12h", "--width", "140")
    both = parse(timeline(tenv, *window).stdout)
    assert list(both) == ["sync"] and both["sync"][0][1][:3] == ["2", "1", "1"]
    only = parse(timeline(tenv, *window, "--host", "app-2").stdout)
    assert only["sync"][0][1][:3] == ["1", "1", "1"] and "S" not in only["sync"][0][0]
    split = parse(timeline(tenv, *window, "--by-host").stdout)
    assert list(split) == ["sync (app-1)", "sync (app-2)"]
    assert split["sync (app-1)"][0][1][:3] == ["1", "0", "0"] and set(split["sync (app-1)"][0][0]) == {" ", "S"}
    assert split["sync (app-2)"][0][1][:3] == ["1", "1", "1"] and set(split["sync (app-2)"][0][0]) == {" ", "F", "."}


def test_named_locks_get_a_row_even_without_runs(known_day):
    result = timeline(known_day, "nobody", "alpha", "--until", "2026-11-30T12:00Z", "--since", "12h", "--width", "140")
    lanes = parse(result.stdout)
    assert list(lanes) == ["nobody", "alpha"]
    assert lanes["nobody"][0][0].strip() == "" and lanes["nobody"][0][1] == ["0", "0", "0", "-", "-", "-"]


def test_an_empty_window_and_no_ledger_say_so(tenv):
    result = timeline(tenv, "--since", "1h")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith("no runs between ")
    book = ledger_of(tenv)
    record(book, "old", at(1), at(2), "succeeded")
    book.close()
    result = timeline(tenv, "--since", "1h")
    assert result.returncode == 0 and result.stdout.startswith("no runs between ")


# --- real runs ------------------------------------------------------------------------------------------------


def expected_columns(row: dict, since: datetime, until: datetime, columns: int) -> tuple[int, int]:
    """Where a run belongs, worked out here from its ledger times with plain arithmetic."""
    span_us = int((until - since).total_seconds() * 1_000_000)

    def column(moment: datetime) -> int:
        return int((moment - since).total_seconds() * 1_000_000) * columns // span_us

    start = datetime.fromisoformat(row["started_at"][:-1]).replace(tzinfo=timezone.utc)
    end = datetime.fromisoformat(row["ended_at"][:-1]).replace(tzinfo=timezone.utc) if row["ended_at"] else until
    first = max(0, column(start))
    last = column(end)
    if end > start and int((end - since).total_seconds() * 1_000_000) * columns % span_us == 0:
        last -= 1  # ended exactly where a column begins
    return first, min(columns - 1, max(first, last))


def test_real_runs_at_their_times(local_env, tmp_path):
    env = {**local_env, "TZ": "UTC"}
    since = datetime.now(timezone.utc) - timedelta(seconds=2)
    assert run_lockrun(env, "-n", "fine", "--", "true").returncode == 0
    assert run_lockrun(env, "-n", "fine", "--", "sleep", "0.6").returncode == 0
    assert run_lockrun(env, "-n", "broken", "--", "sh", "-c", "exit 3").returncode == 3
    assert run_lockrun(env, "-n", "slowpoke", "--timeout", "0.3", "--", "sleep", "5").returncode == 124
    # Two holders of one --slots 2 name at once: their bars must not hide each other.
    stop = tmp_path / "stop"
    hold = f"touch {tmp_path}/$1; while [ ! -e {stop} ]; do sleep 0.05; done"
    first = spawn_lockrun(env, "-n", "pair", "--slots", "2", "--", "sh", "-c", hold, "sh", "first")
    wait_until((tmp_path / "first").exists, what="the first holder's command")
    assert run_lockrun(env, "-n", "pair", "--slots", "2", "--", "sleep", "0.2").returncode == 0
    second = spawn_lockrun(env, "-n", "pair", "--slots", "2", "--", "sh", "-c", hold, "sh", "second")
    wait_until((tmp_path / "second").exists, what="the second holder's command")
    # A third caller finds both slots taken: a busy skip.
    assert run_lockrun(env, "-n", "pair", "--slots", "2", "--", "true").returncode == 75
    stop.touch()
    assert first.wait(30) == 0 and second.wait(30) == 0
    until = datetime.now(timezone.utc) + timedelta(seconds=1)
    columns = 80
    width = columns + 9 + 4 + FIGURES
    result = timeline(env, "--since", since.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                      "--until", until.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "--width", str(width))
    assert result.returncode == 0, result.stderr
    lanes = parse(result.stdout)
    assert set(lanes) == {"fine", "broken", "slowpoke", "pair"}
    rows = [r for r in history(env) if r["status"] != "busy"]
    for name, lane in lanes.items():
        runs = [r for r in rows if r["name"] == name]
        for row in runs:
            first, last = expected_columns(row, since, until, columns)
            letter = tl.LETTERS[row["status"]]
            track = [cells for cells, _ in lane if cells[first] == letter and cells[last] == letter]
            assert track, f"{name}: {row['status']} run expected in columns {first}..{last}:\n{result.stdout}"
        assert lane[0][1][:2] == [str(len(runs)), str(sum(r["status"] != "succeeded" for r in runs))]
    assert len(lanes["pair"]) == 2, "the overlapping --slots runs share a row"
    assert lanes["pair"][0][1][2] == "1"  # the busy skip, counted
    assert lanes["slowpoke"][0][1][-1] == "timeout" and lanes["broken"][0][1][-1] == "failed"


def test_the_ledger_and_history_rows_draw_the_same_chart(known_day, tmp_path):
    """The seam for other sources: history --json rows through lanes_from_rows draw what the ledger draws."""
    rows = history(known_day)
    now = datetime.now(timezone.utc)
    window = tl.Window(at(0), UNTIL, now)
    from_rows = lanes_from_rows(rows, window)
    book = Ledger(os.path.join(known_day["LOCKRUN_STATE_DIR"], "ledger.db"),
                  known_dead=this_host.known_dead).open(create=False)
    try:
        keys = book.timeline().window_lanes(tl.iso(window.since), tl.iso(window.until))
        from_ledger = list(tl.lanes(book.timeline().window(tl.iso(window.since), tl.iso(window.until))))
    finally:
        book.close()
    labels = [tl.label(name, h) for name, h in keys]
    assert labels == [lane.name for lane in from_rows]
    text = render_timeline.text_lines(labels, tl.layout(from_ledger, window), window, 130, colour=False)
    text_rows = render_timeline.text_lines(labels, tl.layout(from_rows, window), window, 130, colour=False)
    assert text == text_rows


def test_fleet_rows_draw_as_the_ledger_does(env, tmp_path):
    """history --fleet rows (every host's, from Redis) go through the same seam: on one host, the
    chart they draw is the ledger's."""
    env = {**env, "TZ": "UTC"}
    since = datetime.now(timezone.utc) - timedelta(seconds=2)
    assert run_lockrun(env, "-n", "fa", "--", "true").returncode == 0
    assert run_lockrun(env, "-n", "fa", "--", "sh", "-c", "exit 2").returncode == 2
    assert run_lockrun(env, "-n", "fb", "--", "sleep", "0.3").returncode == 0
    until = datetime.now(timezone.utc) + timedelta(seconds=1)
    window = tl.Window(since, until, until)
    fleet_rows = history(env, "--fleet")
    assert {row["host"] for row in fleet_rows} == {this_host.hostname()} and len(fleet_rows) == 3
    from_fleet = lanes_from_rows(fleet_rows, window, by_host=True)
    book = Ledger(os.path.join(env["LOCKRUN_STATE_DIR"], "ledger.db"), known_dead=this_host.known_dead).open(
        create=False)
    try:
        from_ledger = list(tl.lanes(book.timeline().window(tl.iso(since), tl.iso(until), with_host=True), by_host=True))
    finally:
        book.close()
    labels = [tl.label(lane.name, lane.host) for lane in from_fleet]
    assert labels == [tl.label(lane.name, lane.host) for lane in from_ledger]
    drawn = [render_timeline.text_lines(labels, tl.layout(lanes, window), window, 120, colour=False)
             for lanes in (from_fleet, from_ledger)]
    assert drawn[0] == drawn[1]


# --- colour, SVG --------------------------------------------------------------------------------------------


def test_colour_adds_to_the_letters(known_day):
    """Colour shows more than NO_COLOR, never less: the same letters, on bars of distinct colours."""
    env = {k: v for k, v in known_day.items() if k != "NO_COLOR"}
    env["FORCE_COLOR"] = "1"
    window = ("--until", "2026-11-30T12:00Z", "--since", "12h", "--width", "140")
    coloured = timeline(env, *window)
    assert coloured.returncode == 0 and "\x1b[" in coloured.stdout
    plain = re.sub(r"\x1b\[[0-9;]*m", "", coloured.stdout)
    assert plain == timeline(known_day, *window).stdout  # every letter is still there
    assert "SSS" in plain and "alpha" in plain
    from lockrun.render.tables import STATUS_STYLES, STYLE_HEX

    failures = ("failed", "lost", "timeout", "killed", "error", "unavailable", "abandoned")
    assert len({STATUS_STYLES[status] for status in failures}) == len(failures)  # no two alike
    assert set(STATUS_STYLES.values()) <= set(STYLE_HEX)  # the SVG has each one's colour


def test_svg_has_one_rect_per_run_and_the_names(known_day, tmp_path):
    out = tmp_path / "day.svg"
    result = timeline(known_day, "--until", "2026-11-30T12:00Z", "--since", "12h", "--svg", str(out))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    root = ElementTree.parse(out).getroot()
    assert root.tag == f"{SVG}svg"
    runs = [e for e in root.iter(f"{SVG}rect") if e.get("class") == "run"]
    assert len(runs) == 10  # every run that reaches into the window, skips aside
    tips = [e.find(f"{SVG}title").text for e in runs]
    assert any(t.startswith("alpha: failed (exit 3), 2026-11-30 03:05:00 to 2026-11-30 03:06:00") for t in tips)
    texts = " ".join("".join(e.itertext()) for e in root.iter(f"{SVG}text"))
    for name in ("alpha", "beta_", "gamma", "delta", "epsil", "overlap", "succeeded", "busy/skipped"):
        assert name in texts
    # The legend: a swatch per status, no two alike (each status has a colour of its own).
    labels = {"".join(e.itertext()) for e in root.iter(f"{SVG}text")}
    assert {"failed", "killed", "error", "abandoned", "unavailable", "timeout", "lost/preempted"} <= labels
    swatches = [e.get("fill") for e in root.iter(f"{SVG}rect") if e.get("width") == "12"]
    assert len(swatches) == len(set(swatches)) >= 9
    skips = [e for e in root.iter(f"{SVG}rect") if e.get("class") == "skip"]
    assert len(skips) == 2
    # The timeout and the run overlapping it lie on two rows.
    beta = [e for e in runs if e.find(f"{SVG}title").text.startswith("beta_")]
    assert len({e.get("y") for e in beta}) == 2


def test_svg_tooltips_say_what_cron_saw(tenv, tmp_path):
    """A run's tooltip says what lockrun exited with (what cron and the shell saw), and how the
    command ended when that says more, as history's EXIT column does; a row written before the
    ledger recorded exit statuses has the command's code alone."""
    assert run_lockrun(tenv, "-n", "late", "--timeout", "0.3", "--", "sleep", "5").returncode == 124
    assert run_lockrun(tenv, "-n", "broken", "--", "sh", "-c", "exit 3").returncode == 3
    assert run_lockrun(tenv, "-n", "fine", "--", "true").returncode == 0
    book = ledger_of(tenv)
    now = stamp(datetime.now(timezone.utc))
    for name, code, exit_status in (("replaced", 0, 76), ("old-row", 5, None)):
        run_id = uuid.uuid4().hex
        book.start(RunRecord(run_id, name, ["job"], "local", now))
        book.finish(run_id, status="lost" if exit_status else "failed", ended_at=now, duration_s=0.5,
                    exit_code=code, exit_status=exit_status)
    book.close()
    result = timeline(tenv, "--since", "1h", "--svg", "-")
    assert result.returncode == 0, result.stderr
    tips = {e.find(f"{SVG}title").text.split(", 20")[0] for e in ElementTree.fromstring(result.stdout.encode()).iter(
        f"{SVG}rect") if e.get("class") == "run"}
    assert tips == {"late: timeout (exit 124, sig 15)", "broken: failed (exit 3)", "fine: succeeded",
                    "replaced: lost (exit 76, cmd 0)", "old-row: failed (exit 5)"}
    exits = {row["name"]: exit_text(row) for row in history(tenv)}  # history's EXIT column
    assert exits == {"late": "124 (sig 15)", "broken": "3", "fine": "0", "replaced": "76 (cmd 0)", "old-row": "5"}


def test_svg_to_stdout(known_day):
    result = timeline(known_day, "--until", "2026-11-30T12:00Z", "--since", "12h", "--svg", "-")
    assert result.returncode == 0
    ElementTree.fromstring(result.stdout.encode())


# --- bad input, hostile data ------------------------------------------------------------------------------------


@pytest.mark.parametrize("args,code,needle", [
    (["--since", "yesterdayish"], 2, "--since"),
    (["--since", "0h"], 2, "--since"),
    (["--since", "-5m"], 2, "--since"),
    (["--since", "99999999999999999999d"], 2, "--since"),
    (["--since", "9" * 400 + "d"], 2, "--since"),
    (["--until", "2026-13-45"], 2, "--until"),
    (["--until", "25:00"], 2, "--until"),
    (["--since", "0001-01-01", "--until", "2026-11-30"], 2, "years"),
    (["--since", "1971-01-01", "--until", "2026-11-30"], 2, "days"),
    (["--since", "3700d"], 2, "3660d"),
    (["--since", "3000d", "--until", "1970-01-02"], 0, ""),
    (["--since", "2026-11-30", "--until", "2026-11-29"], 2, "before"),
    (["--until", "9999-12-31T23:59:59", "--since", "1d"], 2, "years"),
    (["--until", "9998-12-31T23:59:59", "--since", "7d"], 0, ""),
    (["--until", "99999d"], 2, "--until"),
    (["--width", "3"], 2, "--width"),
    (["--width", "69"], 2, "--width"),
    (["--width", "1001"], 2, "--width"),
    (["--width", "99999999999999999999999"], 2, "--width"),
    (["--width", "abc"], 2, "--width"),
    (["--host", ""], 2, "--host"),
    (["--host", "a b"], 2, "--host"),
    (["bad name!"], 2, "NAME"),
    (["--svg", "/nonexistent-dir/x.svg"], 1, "cannot write the SVG"),
])
def test_bad_input_is_one_line(known_day, args, code, needle):
    result = timeline(known_day, *args)
    assert result.returncode == code, result.stderr
    if code:
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("lockrun: "), result.stderr
        assert needle in result.stderr and "Traceback" not in result.stderr


def test_an_unwritable_svg_path_leaves_nothing_behind(known_day, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    target = folder / "a.svg"
    target.mkdir()  # a directory where the file should go
    result = timeline(known_day, "--svg", str(target))
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert sorted(p.name for p in folder.iterdir()) == ["a.svg"]


def test_rows_written_by_someone_else_do_not_break_it(tenv):
    book = ledger_of(tenv)
    record(book, "fine", at(1), at(2), "succeeded")
    book.close()
    db = sqlite3.connect(os.path.join(tenv["LOCKRUN_STATE_DIR"], "ledger.db"))
    columns = "run_id, name, status, host, pid, command, backend, started_at, ended_at, duration_s"
    hostile = [
        ("a1", "weird", "no-such-status", "h", 1, "[]", "local", stamp(at(3)), stamp(at(4)), "abc"),
        ("a2", "weird", "succeeded", "h", 1, "not json", "local", 12345, stamp(at(4)), 1.0),
        ("a3", "weird", "failed", "h", 1, "[]", "local", stamp(at(5)), 67890, None),
        ("a4", "weird", "failed", "h", 1, "[]", "local", stamp(at(6)), stamp(at(5)), -3600.0),  # ends before it starts
        ("a5", "weird", "succeeded", "h", 1, "[]", "local", stamp(at(7)), "2026-11-30T07:30", 1.0),
        ("a6", "weird", "succeeded", None, 1, "[]", "local", stamp(at(8)), stamp(at(8, 10)), 600.0),
        ("a7", "weird", "running", "h", 1, "[]", "local", "garbage", None, None),
        ("a8", 42, "succeeded", "h", 1, "[]", "local", stamp(at(9)), stamp(at(9, 5)), 300.0),
        ("a9", "weird", "succeeded", b"\xff", 1, "[]", "local", stamp(at(10)), stamp(at(10, 5)), float("inf")),
    ]
    for row in hostile:
        with contextlib.suppress(sqlite3.IntegrityError):  # NOT NULL host: that row cannot exist
            db.execute(f"INSERT INTO runs ({columns}) VALUES (?,?,?,?,?,?,?,?,?,?)", row)
    # Text that is not UTF-8, in a name, a host and a status.
    db.execute(f"INSERT INTO runs ({columns}) VALUES ('b1', CAST(x'fffe41' AS TEXT), 'failed', 'h', 1, '[]', 'local',"
               " ?, ?, 1.0)", (stamp(at(2)), stamp(at(3))))
    db.execute(f"INSERT INTO runs ({columns}) VALUES ('b2', 'weird', 'succeeded', CAST(x'c328' AS TEXT), 1, '[]',"
               " 'local', ?, ?, 1.0)", (stamp(at(11)), stamp(at(11, 5))))
    db.execute(f"INSERT INTO runs ({columns}) VALUES ('b3', 'weird', CAST(x'80' AS TEXT), 'h', 1, '[]',"
               " 'local', ?, ?, 1.0)", (stamp(at(11, 10)), stamp(at(11, 20))))
    db.commit()
    db.close()
    # 42 was stored as the text "42" (the column's type affinity); the name that is not UTF-8 cannot
    # be asked for and is left out.
    expected = {"": {"42", "fine", "weird"},
                "--by-host": {"42 (h)", "fine (vm)", "weird (h)", "weird (?)", "weird (\ufffd()"},
                "weird --host h": {"weird"}, "--svg -": None}
    for args, lanes in expected.items():
        result = timeline(tenv, "--until", "2026-11-30T12:00Z", "--since", "12h", "--width", "140", *args.split())
        assert result.returncode == 0, result.stderr
        assert result.stderr == "" and "Traceback" not in result.stdout
        if lanes is not None:
            assert set(parse(result.stdout)) == {lane.replace("vm", this_host.hostname()) for lane in lanes}


@pytest.mark.parametrize("colour", [False, True])
def test_a_closed_pipe_is_not_an_error(tenv, colour):
    book = ledger_of(tenv)
    for i in range(200):  # 200 lines of 1000 characters: more than a pipe holds
        record(book, f"job-{i}", at(1), at(2), "succeeded")
    book.close()
    env = {**tenv, "FORCE_COLOR": "1"} if colour else tenv
    if colour:
        env.pop("NO_COLOR")
    argv = lockrun_argv("timeline", "--until", "2026-11-30T12:00Z", "--since", "12h", "--width", "1000")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (0, b"")


def test_the_window_index_is_there(known_day):
    db = sqlite3.connect(os.path.join(known_day["LOCKRUN_STATE_DIR"], "ledger.db"))
    plan = " ".join(str(row) for row in db.execute(
        "EXPLAIN QUERY PLAN SELECT started_at, ended_at, status, duration_s FROM runs WHERE name = 'a'"
        " AND ended_at >= '2026' AND started_at < '2027' ORDER BY ended_at, started_at"))
    db.close()
    assert "COVERING INDEX runs_timeline" in plan and "TEMP B-TREE" not in plan


# --- the pure layout ----------------------------------------------------------------------------------------------


def window_of(hours: int = 12, columns: int = 72) -> tuple[tl.Window, list[str]]:
    window = tl.Window(UNTIL - timedelta(hours=hours), UNTIL, UNTIL + timedelta(hours=1))
    return window, window.boundaries(columns)


def test_boundaries_are_exact():
    window, bounds = window_of()
    assert bounds[0] == "2026-11-30T00:00:00.000000Z" and bounds[6] == "2026-11-30T01:00:00.000000Z"
    assert bounds[-1] == "2026-11-30T12:00:00.000000Z" and len(bounds) == 73
    odd = tl.Window(at(0), at(0) + timedelta(seconds=1), at(1)).boundaries(3)
    assert odd[1] == "2026-11-30T00:00:00.333333Z"


def test_stacking_is_exact_and_minimal():
    window, bounds = window_of()
    span = lambda a, b, status="succeeded": (stamp(at(*a)), stamp(at(*b)), status, 60.0)  # noqa: E731
    runs = [span((1, 0), (2, 0)), span((1, 30), (3, 0), "failed"), span((2, 0), (2, 10)), span((2, 30), (4, 0)),
            span((3, 0), (3, 5), "lost")]
    (chart,) = tl.layout([tl.Lane("x", None, runs, [])], window)
    rows = ["".join(tl.LETTERS.get(c, " ") if c else " " for c in tl.cells(t, bounds)) for t in chart.tracks]
    # 1:00-2:00 and 2:00-2:10 touch but do not overlap: one row, and 2:30-4:00 after them; the run
    # from 1:30 goes below, and the one at 3:00 joins it there, as it is free again by then.
    assert [r.strip() for r in rows] == ["S" * 7 + "  " + "S" * 9, "F" * 9 + "L"]
    assert extent(rows[0], "S") == (6, 23) and extent(rows[1], "F") == (9, 17) and extent(rows[1], "L") == (18, 18)
    assert chart.figures.runs == 5 and chart.figures.failures == 2 and chart.figures.last_status == "lost"


def test_sequential_runs_take_the_fast_path_in_any_order():
    window, bounds = window_of()
    runs = [(stamp(at(h)), stamp(at(h, 30)), "succeeded", 1800.0) for h in range(12)]
    (ordered,) = tl.layout([tl.Lane("x", None, runs, [])], window)
    (shuffled,) = tl.layout([tl.Lane("x", None, runs[::-1], [])], window)
    assert len(ordered.tracks) == len(shuffled.tracks) == 1
    assert tl.cells(ordered.tracks[0], bounds) == tl.cells(shuffled.tracks[0], bounds)


def test_parse_moment_forms():
    assert parse_moment("90m", "--since") == 5400.0
    assert parse_moment("1.5h", "--since") == 5400.0
    assert parse_moment("12", "--since") == parse_moment("12s", "--since") == 12.0  # a bare number: seconds
    assert parse_moment("2026-11-30T12:00Z", "--until") == UNTIL
    assert parse_moment("2026-11-30T13:00+01:00", "--until") == UNTIL
    assert parse_moment("now", "--until") <= datetime.now(timezone.utc)
    for bad in ("", "12x", "tomorrowish", "2026-02-30", "-1h", "1e5h", "nan", "inf"):
        with pytest.raises(UsageError):
            parse_moment(bad, "--since")


def test_rows_from_another_source_are_read_defensively():
    window, _ = window_of()
    rows = [
        {"name": "a", "status": "succeeded", "started_at": "2026-11-30T01:00:00Z", "ended_at": "2026-11-30T01:30:00Z",
         "duration_s": 1800, "host": "h1"},  # a shorter ISO form
        {"name": "a", "status": "failed", "started_at": "2026-11-30T02:00:00.000+00:00",
         "ended_at": "2026-11-30T02:10:00.000+00:00", "duration_s": "600", "host": "h2"},
        {"name": "a", "status": "busy", "started_at": "2026-11-30T03:00:00.000000Z", "ended_at": None},
        {"name": "a", "status": "succeeded", "started_at": "yesterday", "ended_at": None},
        {"name": None, "status": "succeeded", "started_at": "2026-11-30T01:00:00Z"},
        {"name": "b", "status": 7, "started_at": "2026-11-30T04:00:00Z", "ended_at": "not a time"},
        "not a row",
    ]
    (lane,) = lanes_from_rows(rows, window)
    assert lane.name == "a" and len(lane.runs) == 2 and len(lane.marks) == 1
    assert lane.runs[0][0] == "2026-11-30T01:00:00.000000Z" and lane.runs[1][3] is None
    assert [x.host for x in lanes_from_rows(rows, window, by_host=True)] == ["?", "h1", "h2"]
    assert [len(x.runs) for x in lanes_from_rows(rows, window, host="h2")] == [1]


def _old_ledger(path, version: int) -> None:
    """A ledger as lockrun wrote it at schema ``version``, with one run."""
    db = sqlite3.connect(path)
    for step in range(1, version + 1):
        for statement in MIGRATIONS[step]:
            db.execute(statement)
    db.execute(f"PRAGMA user_version = {version}")
    db.execute("INSERT INTO runs (run_id, name, status, host, pid, command, backend, started_at, ended_at, duration_s)"
               " VALUES ('r', 'older', 'succeeded', 'h', 1, '[]', 'local', ?, ?, 1500.0)",
               (stamp(at(1)), stamp(at(1, 25))))
    db.commit()
    db.close()


def test_a_version_5_ledger_migrates_and_draws(tenv, tmp_path):
    path = tmp_path / "v5.db"
    _old_ledger(path, 5)
    result = timeline(tenv, "--ledger", str(path), "--until", "2026-11-30T12:00Z", "--since", "12h", "--width", "140")
    assert result.returncode == 0, result.stderr
    cells, figures = parse(result.stdout)["older"][0]
    # 01:00 to 01:25 at 8m40s a column (names take 9 characters at least): columns 6 to 9
    assert extent(cells, "S") == (6, 9) and figures[:2] == ["1", "0"], result.stdout
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_ledger_that_cannot_be_read_or_migrated_is_one_line(tenv, tmp_path):
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"SQLite format 3\0" + bytes(range(256)) * 20)
    immutable = tmp_path / "immutable.db"  # a version 5 ledger nobody may write: it cannot gain the indexes
    _old_ledger(immutable, 5)
    if subprocess.run(["chattr", "+i", str(immutable)], capture_output=True).returncode != 0:
        pytest.fail("chattr +i failed: the tests run as root on a file system with attributes (ext4)")
    try:
        for path, needle in ((corrupt, "not a database"), (immutable, "readonly database")):
            result = timeline(tenv, "--ledger", str(path), "--since", "12h")
            assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
            assert result.stderr.startswith("lockrun: cannot read the run ledger: ") and needle in result.stderr
            assert result.stdout == ""
    finally:
        subprocess.run(["chattr", "-i", str(immutable)], check=True)


def test_skips_at_one_moment_that_differ_in_a_field_someone_else_left_empty_still_draw():
    """Two busy skips of one name in the same millisecond, one of them with no host (a fleet
    record's entry another writer left without one): they sort by their start, never by a field
    that may be missing (this was a TypeError out of `timeline --fleet`)."""
    now = datetime.now(timezone.utc)
    moment = (now - timedelta(minutes=5)).strftime(ISO_FORMAT)
    rows = [{"name": "n", "status": "busy", "started_at": moment, "ended_at": moment, "host": host}
            for host in ("app-1", None, "app-2")]
    lanes = lanes_from_rows(rows, tl.Window(now - timedelta(hours=1), now, now), by_host=True)
    assert sum(len(lane.marks) for lane in lanes) == 3
    assert list(tl.layout(lanes, tl.Window(now - timedelta(hours=1), now, now)))
