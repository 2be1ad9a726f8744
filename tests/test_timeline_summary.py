"""The timeline drawn from a lane's columns (timeline_charts) against the same ledger drawn from its
rows (ledger.window and timeline.layout) and against a small reference renderer kept here, which
draws from every row the straightforward way: each run against each column.

Ledgers are random: runs written through the ledger's own API at times drawn from a small grid
(so that runs touch, tie, overlap and have no length), skips, runs still going (alive and with
their lockrun gone), runs across both edges of the window, and now and then a row someone else
wrote. The charts are rendered as plain text and must be the same, character for character.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import uuid
import xml.etree.ElementTree as ElementTree
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockrun.core.clock import ISO_FORMAT
from lockrun.core.record import NOT_A_RUN
from lockrun.ledger.store import Ledger, RunRecord
from lockrun.render import timeline_svg
from lockrun.render import timeline_text as render_timeline
from lockrun.system import host as this_host
from lockrun.views import timeline as tl
from lockrun.views import timeline_charts

BASE = datetime(2026, 11, 30, 0, 0, tzinfo=timezone.utc)
STEP = timedelta(minutes=7)  # the grid runs start and end on: coarse, so that times coincide
STATUSES = ["succeeded"] * 6 + ["failed", "timeout", "lost", "preempted", "killed", "error", "unavailable",
                                "busy", "duplicate", "unlocked"]
SVG = "{http://www.w3.org/2000/svg}"


def stamp(moment: datetime) -> str:
    return moment.strftime(ISO_FORMAT)


runs_strategy = st.lists(
    st.tuples(
        st.sampled_from(["alpha", "beta", "gamma"]),
        st.integers(0, 60),  # start, in steps from BASE
        st.sampled_from([0, 0, 1, 1, 1, 2, 3, 5, 13]),  # length in steps (0: no length)
        st.sampled_from(STATUSES),
        st.sampled_from([0, 0, 0, 1, 2, 3]),  # microseconds to nudge the start by: near-ties
        st.sampled_from(["h1", "h1", "h2"]),
    ),
    max_size=40,
)
# Runs of one name that follow one another (the lanes drawn from columns), from (gap, length)
# in steps: a gap of 0 is a run that starts as the one before it ends.
followers_strategy = st.lists(
    st.tuples(st.sampled_from([0, 0, 1, 1, 2, 4]), st.sampled_from([0, 1, 1, 2, 3]), st.sampled_from(STATUSES)),
    min_size=4, max_size=30,
)
open_strategy = st.lists(
    st.tuples(st.sampled_from(["alpha", "beta", "gamma", "delta"]), st.integers(0, 60), st.booleans()), max_size=3)


def following(name: str, chain) -> list[tuple]:
    runs, at = [], 0
    for gap, length, status in chain:
        runs.append((name, at + gap, length, status, 0, "h1"))
        at += gap + (length if status not in ("busy", "duplicate", "unlocked") else 0)
    return runs


def write(book: Ledger, runs, still_running) -> None:
    for name, start, length, status, nudge, host in runs:
        begin = BASE + start * STEP + timedelta(microseconds=nudge)
        end = begin + length * STEP
        run_id = uuid.uuid4().hex
        book.start(RunRecord(run_id, name, ["job"], "local", stamp(begin), host=host))
        book.finish(run_id, status=status, ended_at=stamp(end), duration_s=float(length * 420 + nudge),
                    exit_code={"succeeded": 0, "failed": 3}.get(status), exit_status={"failed": 3}.get(status))
    for name, start, alive in still_running:
        pid = os.getpid()
        started = this_host.process_start(pid) if alive else 1  # not our start: its lockrun is gone
        book.start(RunRecord(uuid.uuid4().hex, name, ["job"], "local", stamp(BASE + start * STEP),
                             pid=pid, pid_start=started))


# --- the reference: every run against every column -------------------------------------------------------


def reference(book: Ledger, window: tl.Window, host: str | None, columns: int, names=None) -> list:
    """Per lane: its name, each sub-row's cells, its skip marks per column and its figures, worked
    out from every row the straightforward way."""
    since, until = tl.iso(window.since), tl.iso(window.until)
    open_end = min(until, tl.iso(window.now))
    bounds = window.boundaries(columns)
    keys = book.timeline().window_lanes(since, until, names, host=host)
    db = sqlite3.connect(book.path)
    try:
        return [_reference_lane(db, name, since, until, open_end, host, bounds)
                for name in dict.fromkeys(name for name, _ in keys)]
    finally:
        db.close()


def _reference_lane(db: sqlite3.Connection, name: str, since: str, until: str, open_end: str, host: str | None,
                    bounds: list[str]) -> tuple:
    where = "name = ? AND started_at < ? AND typeof(started_at) = 'text'" + (" AND host = ?" if host else "")
    args = [name, until] + ([host] if host else [])
    finished = db.execute(f"SELECT started_at, ended_at, status, duration_s FROM runs WHERE {where}"
                          " AND typeof(ended_at) = 'text' AND ended_at >= ? ORDER BY ended_at, started_at, status",
                          [*args, since]).fetchall()
    unfinished = db.execute(f"SELECT started_at, status, boot_id, pid, pid_start, pid_ns, machine_id FROM runs"
                            f" WHERE {where} AND ended_at IS NULL ORDER BY started_at", args).fetchall()
    runs, marks, durations = [], [], []
    for start, end, status, duration in finished:
        if status in NOT_A_RUN:
            if start >= since:
                marks.append(start)
            continue
        runs.append((start, max(start, end), status))
        if isinstance(duration, (int, float)) and abs(duration) < 1e12:
            durations.append(duration)
    for start, status, *process in unfinished:
        if status in NOT_A_RUN:
            continue
        if status == "running" and this_host.known_dead(*process):
            status = "abandoned"
        runs.append((start, max(start, open_end) if status == "running" else start, status))
    tracks: list[list[tuple]] = []  # each run, in order of start, into the first sub-row free by then
    for run in sorted(runs, key=lambda run: (run[0], run[1])):
        row = next((track for track in tracks if track[-1][1] <= run[0]), None)
        if row is None:
            tracks.append(row := [])
        row.append(run)
    last = max((track[-1] for track in tracks), key=lambda run: run[0])[2] if tracks else None
    figures = (len(runs), sum(run[2] in tl.FAILURES for run in runs), len(marks),
               statistics.median(durations) if durations else None, max(durations, default=None), last)
    columns = list(zip(bounds, bounds[1:], strict=False))
    return (name, [[_worst(track, begin, end) for begin, end in columns] for track in tracks],
            [any(begin <= mark < end for mark in marks) for begin, end in columns], figures)


def _worst(track: list[tuple], begin: str, end: str) -> str | None:
    # A run covers the columns from the one it starts in to the one it ends in, but not one its
    # end merely touches; a run of no length fills the column it starts in.
    statuses = {status for start, stop, status in track
                if start < end and (stop > begin if stop > start else start >= begin)}
    return max(statuses, key=lambda s: tl.SEVERITY.index(s) if s in tl.SEVERITY else -1) if statuses else None


def drawn(charts, window: tl.Window, columns: int) -> list:
    """The same of the engine's charts."""
    bounds = window.boundaries(columns)
    return [(chart.name, [tl.cells(track, bounds) for track in chart.tracks], tl.mark_cells(chart.marks, bounds),
             tuple(chart.figures)) for chart in charts]


# --- the comparisons ------------------------------------------------------------------------------------------


def three_charts(book: Ledger, window: tl.Window, host: str | None, width: int, names=None) -> tuple[list, list]:
    """The text of the chart drawn from columns (where they do) and from rows; and the cells of the
    columns' chart and the reference's."""
    since, until = tl.iso(window.since), tl.iso(window.until)
    keys = book.timeline().window_lanes(since, until, names, host=host)
    labels = [tl.label(name, lane_host) for name, lane_host in keys]
    runs = book.timeline().window(since, until, [name for name, _ in keys], host=host)
    from_rows = render_timeline.text_lines(labels, tl.layout(tl.lanes(runs), window), window, width, colour=False)
    new_labels, charts = timeline_charts.from_ledger(book, window, names, host, False)
    charts = list(charts)
    assert new_labels == labels
    columns = width // 2
    assert drawn(charts, window, columns) == reference(book, window, host, columns, names)
    return render_timeline.text_lines(labels, charts, window, width, colour=False), from_rows


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=runs_strategy, chain=followers_strategy, still_running=open_strategy, since=st.integers(-5, 40),
       span=st.integers(1, 40), width=st.integers(70, 200), on_grid=st.booleans(),
       host=st.sampled_from([None, None, "h1"]), now_step=st.integers(0, 80))
def test_columns_draw_what_the_rows_and_the_reference_draw(tmp_path_factory, runs, chain, still_running, since, span,
                                                           width, on_grid, host, now_step):
    book = Ledger(tmp_path_factory.mktemp("ledger") / "ledger.db", known_dead=this_host.known_dead).open()
    try:
        write(book, runs[:len(runs) // 4] + following("delta", chain), still_running)
        if on_grid:  # the window and its columns begin where runs begin and end: ties with every edge
            span = max(span, 14)
            width = 57 + span * (1 + width % 2)  # the names fit in 9 characters: a step or half a step a column
            start = BASE + since * STEP
        else:
            start = BASE + since * STEP + timedelta(seconds=90)
        window = tl.Window(start, start + span * STEP, BASE + now_step * STEP)
        from_columns, from_rows = three_charts(book, window, host, width)
        assert from_columns == from_rows
    finally:
        book.close()


def test_a_lane_that_follows_on_is_drawn_from_its_columns(tmp_path):
    """The property above would pass if every lane fell back to its rows: this one must not."""
    book = Ledger(tmp_path / "ledger.db", known_dead=this_host.known_dead).open()
    write(book, [("alpha", i * 2, 1, "failed" if i % 7 == 0 else "succeeded", 0, "h1") for i in range(30)]
          + [("alpha", 5, 0, "busy", 0, "h1"), ("alpha", 9, 0, "unavailable", 0, "h1"),
             ("alpha", 9, 0, "failed", 0, "h1")], [])
    window = tl.Window(BASE, BASE + 70 * STEP, BASE + 70 * STEP)
    since, until = tl.iso(window.since), tl.iso(window.until)
    columns = book.timeline().columns("alpha", since, until, until)
    assert columns is not None and len(columns.starts) == 32 and len(columns.marks) == 1
    assert {status: len(starts) for status, (starts, _) in columns.others.items()} == {"failed": 6, "unavailable": 1}
    assert (columns.median_s, columns.max_s, columns.last_status) == (420.0, 420.0, "succeeded")
    chart = tl.chart(timeline_charts.lane("alpha", columns))
    assert chart is not None and len(chart.tracks) == 1 and chart.tracks[0].details is None
    assert chart.figures[:3] == (32, 7, 1)
    # Two runs of no length at the same time (an unavailable one and a failed one): the failure is drawn.
    assert tl.cells(chart.tracks[0], window.boundaries(70))[9] == "failed"
    from_columns, from_rows = three_charts(book, window, None, 120)
    assert from_columns == from_rows
    book.close()


def test_overlaps_and_odd_rows_are_drawn_from_their_rows(tmp_path):
    book = Ledger(tmp_path / "ledger.db", known_dead=this_host.known_dead).open()
    write(book, [("alpha", 0, 5, "succeeded", 0, "h1"), ("alpha", 2, 1, "failed", 0, "h1")]
          + [(name, 0, 1, "succeeded", 0, "h1") for name in ("beta", "gamma", "delta", "epsilon")], [])
    book.close()
    db = sqlite3.connect(tmp_path / "ledger.db")
    columns = "run_id, name, status, host, pid, command, backend, started_at, ended_at"
    for row in (("b", "beta", "running", stamp(BASE + 3 * STEP), stamp(BASE + 4 * STEP)),  # ended, yet running
                ("c", "gamma", "succeeded", stamp(BASE + 3 * STEP).encode(), stamp(BASE + 4 * STEP)),  # a blob start
                ("d", "delta", "succeeded", stamp(BASE + 3 * STEP) + ",", stamp(BASE + 4 * STEP)),  # a comma
                ("e", "epsilon", "succeeded", stamp(BASE + 30 * STEP), stamp(BASE + 4 * STEP))):  # starts after
        db.execute(f"INSERT INTO runs ({columns}) VALUES (?, ?, ?, 'h1', 1, '[]', 'local', ?, ?)", row)
    db.commit()
    db.close()
    book = Ledger(tmp_path / "ledger.db", known_dead=this_host.known_dead).open()
    window = tl.Window(BASE, BASE + 10 * STEP, BASE + 10 * STEP)
    since, until = tl.iso(window.since), tl.iso(window.until)
    reads = book.timeline()
    assert reads.odd_names() == {"beta", "gamma"}
    assert reads.columns("delta", since, until, until) is None
    for name in ("alpha", "epsilon"):  # an overlap; a run that starts after the window, but ends in it
        assert tl.chart(timeline_charts.lane(name, reads.columns(name, since, until, until))) is None
    from_columns, from_rows = three_charts(book, window, None, 100)
    assert from_columns == from_rows
    book.close()


@pytest.mark.parametrize("count", [1, 2, 3, 4, 9])
def test_the_median_walk_matches_a_sort(tmp_path, count):
    """Durations ending after the window (the tail) and rows without a usable duration."""
    book = Ledger(tmp_path / "ledger.db", known_dead=this_host.known_dead).open()
    durations = [5.5, 1.0, 3.25, 8.0, 2.0, 2.0, 13.0, 0.5, 4.0][:count]
    for i, duration in enumerate(durations):
        run_id = uuid.uuid4().hex
        begin = BASE + i * STEP
        book.start(RunRecord(run_id, "m", ["job"], "local", stamp(begin)))
        book.finish(run_id, status="succeeded", ended_at=stamp(begin + timedelta(minutes=5)),
                    duration_s=duration if i != 1 else None)
    for until in (BASE + (count - 1) * STEP + timedelta(minutes=2), BASE + 20 * STEP):  # a tail; all in the window
        window = tl.Window(BASE, until, BASE + 20 * STEP)
        from_columns, from_rows = three_charts(book, window, None, 120)
        assert from_columns == from_rows
    book.close()


def test_an_svg_of_a_busy_lane_draws_its_stretches(tmp_path):
    """Runs half a minute apart over twelve hours (two to a pixel): a rect per stretch of pixels
    they cover, whose tooltip counts them; a run alone in its pixels keeps its own tooltip."""
    book = Ledger(tmp_path / "ledger.db", known_dead=this_host.known_dead).open()
    starts = [timedelta(seconds=30 * i) for i in range(600)] + [timedelta(hours=8)] + [
        timedelta(hours=9, seconds=30 * i) for i in range(360)]
    for offset in starts:
        run_id = uuid.uuid4().hex
        begin = BASE + offset
        failed = offset in (timedelta(hours=2), timedelta(hours=8))
        book.start(RunRecord(run_id, "busy-job", ["job"], "local", stamp(begin), host="h1"))
        book.finish(run_id, status="failed" if failed else "succeeded", ended_at=stamp(begin + timedelta(seconds=5)),
                    duration_s=5.0, exit_code=3 if failed else 0, exit_status=3 if failed else 0)
    window = tl.Window(BASE, BASE + timedelta(hours=12), BASE + timedelta(hours=12))
    labels, charts = timeline_charts.from_ledger(book, window, None, None, False,
                                                 per_run_below=timeline_svg.SVG_PER_RUN_BELOW)
    charts = list(charts)
    assert charts[0].tracks[0].details is None  # drawn from its columns
    document = timeline_svg.svg(labels, charts, window, details=timeline_charts.run_details(book, None))
    book.close()
    rects = [e for e in ElementTree.fromstring(document).iter(f"{SVG}rect") if e.get("class") in ("run", "runs")]
    tips = [e.find(f"{SVG}title").text for e in rects]
    assert [e.get("class") for e in rects] == ["runs", "run", "runs"]
    assert tips[0] == "busy-job: 600 runs from 2026-11-30 00:00:00 to 2026-11-30 04:59:35: 599 succeeded, 1 failed"
    assert tips[1].startswith("busy-job: failed (exit 3), 2026-11-30 08:00:00 to 2026-11-30 08:00:05 (5.0s) on h1,")
    assert tips[2] == "busy-job: 360 runs from 2026-11-30 09:00:00 to 2026-11-30 11:59:35: 360 succeeded"
    assert [e.get("fill") for e in rects] == [timeline_svg._hex("failed"), timeline_svg._hex("failed"),
                                              timeline_svg._hex("succeeded")]


def test_the_columns_read_their_indexes(tmp_path):
    """Each read is one range of a covering index, without a sort: a partial index serves only
    a query that repeats its WHERE clause word for word, so a changed clause would read the table."""
    book = Ledger(tmp_path / "ledger.db", known_dead=this_host.known_dead).open()
    write(book, [("alpha", 0, 1, "failed", 0, "h1"), ("alpha", 2, 1, "succeeded", 0, "h1"),
                 ("alpha", 3, 0, "busy", 0, "h1")], [])
    since, until = stamp(BASE), stamp(BASE + 10 * STEP)
    statements: list[str] = []
    book._db.set_trace_callback(statements.append)  # every statement, with its parameters in place
    for window_until in (until, stamp(BASE + 2 * STEP)):  # every run in the window, and not
        assert book.timeline().columns("alpha", since, window_until, window_until) is not None
    book._db.set_trace_callback(None)
    plans = {sql: " ".join(str(row[-1]) for row in book._db.execute("EXPLAIN QUERY PLAN " + sql))
             for sql in statements if sql.startswith("SELECT") and "ended_at IS NULL" not in sql}
    book.close()
    used = {index for plan in plans.values() for index in ("runs_timeline", "runs_notable", "runs_durations")
            if f"COVERING INDEX {index}" in plan}
    assert used == {"runs_timeline", "runs_notable", "runs_durations"}
    for sql, plan in plans.items():
        assert "TEMP B-TREE" not in plan and "SCAN runs" not in plan, (sql, plan)


def test_a_chart_stream_abandoned_half_way_closes_quietly(tmp_path):
    """The columns are read in one transaction; a stream closed after its ledger ends it without a word."""
    book = Ledger(tmp_path / "ledger.db", known_dead=this_host.known_dead).open()
    write(book, [(name, 0, 1, "succeeded", 0, "h1") for name in ("alpha", "beta")], [])
    window = tl.Window(BASE, BASE + 10 * STEP, BASE + 10 * STEP)
    _, charts = timeline_charts.from_ledger(book, window, None, None, False)
    assert next(charts).name == "alpha"
    book.close()
    charts.close()  # no exception: the connection it would end is gone
    other = Ledger(tmp_path / "ledger.db").open()  # and nothing was left locked
    _, charts = timeline_charts.from_ledger(other, window, None, None, False)
    assert [chart.name for chart in charts] == ["alpha", "beta"]
    other.close()
