"""The timeline drawn from summaries (lane_summary, via timeline_charts) against the same ledger
drawn from its runs (ledger.window and timeline.layout, the drawing the summaries replace for speed).

Ledgers are random: runs written through the ledger's own API at times drawn from a small grid
(so that runs touch, tie, overlap and have no length), skips, runs still going (alive and with
their lockrun gone), runs across both edges of the window, and now and then a row someone else
wrote. Both charts are rendered as plain text and must be the same, character for character.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
import xml.etree.ElementTree as ElementTree
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockrun import host as this_host
from lockrun import lane_summary, render_timeline, timeline_charts
from lockrun import timeline as tl
from lockrun.clock import ISO_FORMAT
from lockrun.ledger import Ledger, RunRecord

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
# Runs of one name that follow one another (the lanes the summaries draw), from (gap, length)
# in steps: a gap of 0 is a run that starts as the one before it ends.
followers_strategy = st.lists(
    st.tuples(st.sampled_from([0, 0, 1, 1, 2, 4]), st.sampled_from([0, 1, 1, 2, 3]), st.sampled_from(STATUSES)),
    min_size=4, max_size=30,
)
open_strategy = st.lists(
    st.tuples(st.sampled_from(["alpha", "beta", "gamma"]), st.integers(0, 60), st.booleans()), max_size=3)


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


def both_charts(book: Ledger, window: tl.Window, host: str | None, width: int, names=None) -> tuple[list, list]:
    since, until = tl.iso(window.since), tl.iso(window.until)
    keys = book.timeline().window_lanes(since, until, names, host=host)
    labels = [tl.label(name, lane_host) for name, lane_host in keys]
    runs = book.timeline().window(since, until, [name for name, _ in keys], host=host)
    from_runs = render_timeline.text_lines(labels, tl.layout(tl.lanes(runs), window), window, width, colour=False)
    new_labels, charts = timeline_charts.from_ledger(book, window, names, host, False)
    assert new_labels == labels
    return from_runs, render_timeline.text_lines(labels, charts, window, width, colour=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=runs_strategy, chain=followers_strategy, still_running=open_strategy, since=st.integers(-5, 40),
       span=st.integers(1, 40), width=st.integers(70, 200), on_grid=st.booleans(),
       host=st.sampled_from([None, None, "h1"]), now_step=st.integers(0, 80))
def test_summaries_draw_what_the_runs_draw(tmp_path_factory, runs, chain, still_running, since, span, width, on_grid,
                                           host, now_step):
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
        from_runs, from_summaries = both_charts(book, window, host, width)
        assert from_summaries == from_runs
    finally:
        book.close()


def test_a_busy_lane_that_follows_on_is_drawn_from_its_summary(tmp_path):
    """The property above would pass if every lane fell back to its runs: this one must not."""
    book = Ledger(tmp_path / "ledger.db", known_dead=this_host.known_dead).open()
    write(book, [("alpha", i * 2, 1, "failed" if i % 7 == 0 else "succeeded", 0, "h1") for i in range(30)]
          + [("alpha", 5, 0, "busy", 0, "h1"), ("alpha", 9, 0, "unavailable", 0, "h1")], [])
    window = tl.Window(BASE, BASE + 70 * STEP, BASE + 70 * STEP)
    since, until = tl.iso(window.since), tl.iso(window.until)
    columns = book.lanes().columns("alpha", since, until)
    summary = lane_summary.summarize("alpha", None, columns, since, until)
    assert summary is not None and summary.track.run_count == 31 and len(summary.marks) == 1
    assert summary.track.zero_length == frozenset({5})  # the unavailable run, at 09 steps, the 6th to end
    median, longest = book.lanes().durations("alpha", since, until, None, summary.ended_in_window, [])
    assert (median, longest) == (420.0, 420.0)
    # A count the index does not bear out (a row changed under the reads, say): no figures, no traceback.
    assert book.lanes().durations("alpha", since, until, None, summary.ended_in_window + 100, []) is None
    from_runs, from_summaries = both_charts(book, window, None, 120)
    assert from_summaries == from_runs
    book.close()


def test_overlaps_and_odd_rows_are_drawn_from_their_runs(tmp_path):
    book = Ledger(tmp_path / "ledger.db", known_dead=this_host.known_dead).open()
    write(book, [("alpha", 0, 5, "succeeded", 0, "h1"), ("alpha", 2, 1, "failed", 0, "h1"),
                 ("beta", 0, 1, "succeeded", 0, "h1")], [])
    book.close()
    db = sqlite3.connect(tmp_path / "ledger.db")
    db.execute("INSERT INTO runs (run_id, name, status, host, pid, command, backend, started_at, ended_at)"
               " VALUES ('x', 'beta', 'mystery', 'h1', 1, '[]', 'local', ?, ?)", (stamp(BASE + 3 * STEP),
                                                                                  stamp(BASE + 4 * STEP)))
    db.execute("INSERT INTO runs (run_id, name, status, host, pid, command, backend, started_at, ended_at)"
               " VALUES ('y', 'gamma', 'succeeded', 'h1', 1, '[]', 'local', '2026-11-30 00:10', ?)",
               (stamp(BASE + 4 * STEP),))
    db.commit()
    db.close()
    book = Ledger(tmp_path / "ledger.db", known_dead=this_host.known_dead).open()
    window = tl.Window(BASE, BASE + 10 * STEP, BASE + 10 * STEP)
    since, until = tl.iso(window.since), tl.iso(window.until)
    for name in ("alpha", "beta", "gamma"):  # an overlap, a status lockrun does not know, a time not its way
        assert lane_summary.summarize(name, None, book.lanes().columns(name, since, until), since, until) is None
    from_runs, from_summaries = both_charts(book, window, None, 100)
    assert from_summaries == from_runs
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
    window = tl.Window(BASE, BASE + (count - 1) * STEP + timedelta(minutes=2), BASE + 20 * STEP)
    from_runs, from_summaries = both_charts(book, window, None, 120)
    assert from_summaries == from_runs
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
    labels, charts = timeline_charts.from_ledger(book, window, None, None, False, per_run_below=0)
    charts = list(charts)
    assert isinstance(charts[0].tracks[0], lane_summary.SummaryTrack)
    document = render_timeline.svg(labels, charts, window,
                                   details=lambda chart, starts: book.timeline().runs_started_at(chart.name, starts))
    book.close()
    rects = [e for e in ElementTree.fromstring(document).iter(f"{SVG}rect") if e.get("class") in ("run", "runs")]
    tips = [e.find(f"{SVG}title").text for e in rects]
    assert [e.get("class") for e in rects] == ["runs", "run", "runs"]
    assert tips[0] == "busy-job: 600 runs from 2026-11-30 00:00:00 to 2026-11-30 04:59:35: 599 succeeded, 1 failed"
    assert tips[1].startswith("busy-job: failed (exit 3), 2026-11-30 08:00:00 to 2026-11-30 08:00:05 (5.0s) on h1,")
    assert tips[2] == "busy-job: 360 runs from 2026-11-30 09:00:00 to 2026-11-30 11:59:35: 360 succeeded"
    assert [e.get("fill") for e in rects] == [render_timeline._hex("failed"), render_timeline._hex("failed"),
                                              render_timeline._hex("succeeded")]


def test_the_summaries_read_their_indexes(tmp_path):
    """Each read is one range of a covering index, without a sort: a partial index serves only
    a query that repeats its WHERE clause word for word, so a changed clause would read the table."""
    book = Ledger(tmp_path / "ledger.db", known_dead=this_host.known_dead).open()
    write(book, [("alpha", 0, 1, "failed", 0, "h1"), ("alpha", 2, 1, "succeeded", 0, "h1")], [])
    since, until = stamp(BASE), stamp(BASE + 10 * STEP)
    statements: list[str] = []
    book._db.set_trace_callback(statements.append)  # every statement, with its parameters in place
    summary = lane_summary.summarize("alpha", None, book.lanes().columns("alpha", since, until), since, until)
    book.lanes().durations("alpha", since, until, None, summary.ended_in_window, [])
    book._db.set_trace_callback(None)
    plans = {sql: " ".join(str(row[-1]) for row in book._db.execute("EXPLAIN QUERY PLAN " + sql))
             for sql in statements if sql.startswith("SELECT")}
    book.close()
    used = {index for plan in plans.values() for index in ("runs_timeline", "runs_notable", "runs_durations")
            if f"COVERING INDEX {index}" in plan}
    assert used == {"runs_timeline", "runs_notable", "runs_durations"}
    for sql, plan in plans.items():
        assert "TEMP B-TREE" not in plan and "SCAN runs" not in plan, (sql, plan)


def test_a_chart_stream_abandoned_half_way_closes_quietly(tmp_path):
    """The summaries read in one transaction; a stream closed after its ledger ends it without a word."""
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
