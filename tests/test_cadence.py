"""Declared cadences (docs/operating.md "Declaring a cadence"): --every / --schedule / --grace,
checked at parse time, kept with the name (fleet-wide in Redis, only when it changed; the
ledger locally), and `status --all`: every known name with its next due start and overdue."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from lockrun.core.cadence import Cadence, judge, overdue_text, parse_cadence
from tests.conftest import assert_one_line, run_lockrun, spawn_lockrun, wait_until


def every_name(env):
    result = run_lockrun(env, "status", "--all", "--json")
    assert result.returncode == 0, result.stderr
    return {lock["name"]: lock for lock in json.loads(result.stdout)["locks"]}


@pytest.mark.parametrize("argv, needle", [
    (("--every", "1h", "--schedule", "0 3 * * *"), "--every and --schedule cannot be combined"),
    (("--grace", "5m"), "--grace widens a declared cadence"),
    (("--schedule", "0 3 * *"), "expected 5 fields"),
    (("--schedule", "0 3 * * * *"), "expected 5 fields"),
    (("--schedule", "61 3 * * *"), "--schedule"),
    (("--schedule", "0 0 30 2 *"), "--schedule"),
    (("--every", "0"), "more than 0"),
    (("--every", "366d"), "at most 365d"),
    (("--every", "1h", "--grace", "-1"), "--grace"),
])
def test_bad_cadences_are_one_line_and_exit_2(local_env, tmp_path, argv, needle):
    marker = tmp_path / "ran"
    assert_one_line(run_lockrun(local_env, "-n", "job", *argv, "--", "touch", str(marker)), 2, needle)
    assert not marker.exists()


def test_status_all_lists_every_known_name_with_its_due_time(any_env):
    assert run_lockrun(any_env, "-n", "hourly", "--every", "1h", "--", "true").returncode == 0
    assert run_lockrun(any_env, "-n", "nightly", "--schedule", "0 3 * * *", "--tz", "Europe/Berlin",
                       "--grace", "10m", "--", "true").returncode == 0
    assert run_lockrun(any_env, "-n", "late", "--every", "1", "--grace", "0", "--", "true").returncode == 0
    assert run_lockrun(any_env, "-n", "plain", "--", "true").returncode == 0
    assert run_lockrun(any_env, "pause", "paused-late", "--for", "1h").returncode == 0
    assert run_lockrun(any_env, "-n", "paused-late", "--every", "1", "--grace", "0", "--", "true").returncode == 0
    holder = spawn_lockrun(any_env, "-n", "running", "--every", "1", "--grace", "0", "--", "sleep", "30")
    try:
        wait_until(lambda: every_name(any_env).get("running", {}).get("state") == "held", what="a holder")
        wait_until(lambda: (every_name(any_env)["late"]["overdue_s"] or 0) > 1, what="late to be overdue")
        names = every_name(any_env)
        # plain `status` lists the held and the paused only; --all every name, held or not
        plain = json.loads(run_lockrun(any_env, "status", "--json").stdout)["locks"]
        assert sorted(lock["name"] for lock in plain) == ["paused-late", "running"]
        assert {"hourly", "nightly", "late", "plain", "paused-late", "running"} <= set(names)
        hourly = names["hourly"]
        assert hourly["cadence"] == {"every_s": 3600.0, "schedule": None, "tz": None, "grace_s": 300.0}
        assert hourly["overdue_s"] is None
        ran = datetime.fromisoformat(hourly["last_run"]["started_at"][:-1])
        due = datetime.fromisoformat(hourly["next_due"][:-1])
        assert abs((due - ran).total_seconds() - 3600) < 1
        nightly = names["nightly"]
        assert nightly["cadence"]["schedule"] == "0 3 * * *" and nightly["cadence"]["tz"] == "Europe/Berlin"
        assert nightly["next_due"].endswith(("T01:00:00.000000Z", "T02:00:00.000000Z"))  # 03:00 in Berlin
        assert names["late"]["overdue_s"] > 1 and names["late"]["last_run"]["host"]
        assert names["paused-late"]["overdue_s"] is None and names["paused-late"]["paused"]  # never overdue
        assert names["running"]["overdue_s"] is None  # its newest start is the holder's, just now
        assert names["plain"]["cadence"] is None and names["plain"]["next_due"] is None
        table = run_lockrun(any_env, "status", "--all").stdout
        assert "NEXT DUE" in table and "overdue" in table and "(every 1h)" in table
        assert "NEXT DUE" not in run_lockrun(any_env, "status").stdout
    finally:
        holder.terminate()
        holder.wait(timeout=30)
    assert_one_line(run_lockrun(any_env, "status", "--all", "hourly"), 2, "--all lists every name")


def test_the_newest_declaration_wins_and_an_unchanged_one_is_not_written_again(env, redis_server):
    client = redis_server.client()

    def sets() -> int:
        return int(client.info("commandstats").get("cmdstat_set", {}).get("calls", 0))

    assert run_lockrun(env, "-n", "job", "--every", "1h", "--", "true").returncode == 0
    assert json.loads(client.get("lockrun:{job}:cadence")) == {"every": 3600.0, "grace": 300.0}
    before = sets()
    assert run_lockrun(env, "-n", "job", "--every", "1h", "--", "true").returncode == 0
    same = sets() - before
    before = sets()
    assert run_lockrun(env, "-n", "job", "--every", "2h", "--", "true").returncode == 0
    assert sets() - before == same + 1  # the changed declaration costs one SET, an unchanged one none
    assert json.loads(client.get("lockrun:{job}:cadence"))["every"] == 7200.0
    assert 0 < client.pttl("lockrun:{job}:cadence") <= 30 * 86400 * 1000
    # a run that declares nothing leaves the declaration; a foreign value reads as none declared
    assert run_lockrun(env, "-n", "job", "--", "true").returncode == 0
    assert every_name(env)["job"]["cadence"]["every_s"] == 7200.0
    client.set("lockrun:{job}:cadence", b"\xff{not json")
    assert every_name(env)["job"]["cadence"]["every_s"] == 7200.0  # the ledger's, this host's
    client.delete("lockrun:{job}:cadence")
    client.hset("lockrun:{job}:cadence", "x", "y")
    result = run_lockrun(env, "status", "--all")
    assert result.returncode == 0 and "Traceback" not in result.stderr


def test_the_ledger_keeps_the_first_time_of_a_declaration(local_env, tmp_path):
    import sqlite3

    for every in ("1h", "1h", "2h"):
        assert run_lockrun(local_env, "-n", "job", "--every", every, "--", "true").returncode == 0
    db = sqlite3.connect(tmp_path / "state" / "ledger.db")
    rows = db.execute("SELECT declaration FROM cadences WHERE name = 'job'").fetchall()
    assert [json.loads(text)["every"] for (text,) in rows] == [7200.0]


def test_due_times_and_overdue():
    now = datetime(2026, 12, 2, 6, 12, tzinfo=timezone.utc)
    nightly = Cadence(schedule="0 3 * * *", tz="UTC", grace_s=600)
    due = judge(nightly, "2026-12-01T03:00:04.000000Z", None, now)
    assert due.next_due == datetime(2026, 12, 2, 3, 0, tzinfo=timezone.utc) and due.overdue_s == 3 * 3600 + 12 * 60
    assert overdue_text(due.overdue_s) == "3h12m"
    assert judge(nightly, "2026-12-01T03:00:04.000000Z", None, now, paused=True).overdue_s is None
    assert judge(nightly, "2026-12-02T03:00:01.000000Z", None, now).overdue_s is None
    within_grace = judge(Cadence(every_s=3600, grace_s=600), (now - timedelta(minutes=65)).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"), None, now)
    assert within_grace.overdue_s is None
    assert judge(Cadence(every_s=60), None, None, now) == (None, None)  # nothing to count from
    for stored in ("", "[]", '{"every": -1}', '{"every": "1h"}', '{"schedule": "bad"}', '{"schedule": "0 3 * * *",'
                   ' "tz": "Mars/Base"}', "x" * 600, b"\xff", None, 12):
        assert parse_cadence(stored) is None, stored
    assert parse_cadence(Cadence(every_s=90, grace_s=0).to_json()) == Cadence(every_s=90, grace_s=0)


def test_metrics_gauges_for_due_times_and_pauses(any_env):
    from prometheus_client.parser import text_string_to_metric_families

    assert run_lockrun(any_env, "-n", "hourly", "--every", "1h", "--", "true").returncode == 0
    assert run_lockrun(any_env, "-n", "late", "--every", "1", "--grace", "0", "--", "true").returncode == 0
    assert run_lockrun(any_env, "-n", "held-off", "--every", "1", "--grace", "0", "--", "true").returncode == 0
    assert run_lockrun(any_env, "-n", "plain", "--", "true").returncode == 0
    assert run_lockrun(any_env, "pause", "held-off", "--for", "1h").returncode == 0

    def gauges(*args):
        result = run_lockrun(any_env, "metrics", *args)
        assert result.returncode == 0, result.stderr
        found: dict[str, dict[str, float]] = {}
        for family in text_string_to_metric_families(result.stdout):
            for sample in family.samples:
                found.setdefault(sample.name, {})[sample.labels.get("name", "")] = sample.value
        return found

    wait_until(lambda: gauges()["lockrun_overdue"].get("late") == 1, what="late to be overdue")
    for args in ([], ["--fleet"]) if "LOCKRUN_REDIS_URL" in any_env else ([],):
        found = gauges(*args)
        assert found["lockrun_overdue"] == {"hourly": 0, "late": 1, "held-off": 0}, args  # paused: never overdue
        assert found["lockrun_paused"] == {"hourly": 0, "late": 0, "held-off": 1, "plain": 0}, args
        due = found["lockrun_next_due_timestamp_seconds"]
        assert set(due) == {"hourly", "late", "held-off"}
        assert abs(due["hourly"] - found["lockrun_last_run_timestamp_seconds"]["hourly"] - 3600) < 1


def test_the_timeline_marks_missed_starts(any_env, tmp_path):
    """A start due by --every that passed (grace and all) with nothing started is a '!' in its lane,
    and a red mark with a tooltip in the SVG; a name without a declaration gets none."""
    assert run_lockrun(any_env, "-n", "tick", "--every", "1", "--grace", "0", "--", "true").returncode == 0
    assert run_lockrun(any_env, "-n", "plain", "--", "true").returncode == 0
    fleet = ["--fleet"] if "LOCKRUN_REDIS_URL" in any_env else []

    def lane(name):
        result = run_lockrun(any_env, "timeline", "--since", "30s", "--width", "100", *fleet)
        assert result.returncode == 0, result.stderr
        return next(line for line in result.stdout.splitlines() if line.startswith(name)), result.stdout

    wait_until(lambda: "!" in lane("tick")[0], what="a missed start")
    tick, text = lane("tick")
    assert "! missed start" in text  # the legend names it once it is drawn
    assert "!" not in lane("plain")[0].split("|")[1]
    svg = tmp_path / "t.svg"
    assert run_lockrun(any_env, "timeline", "--since", "30s", "--svg", str(svg), *fleet).returncode == 0
    drawn = svg.read_text()
    assert drawn.count('class="missed"') >= 1 and "missed start" in drawn and "nothing started" in drawn
    # a start catches up: nothing after it is missed until its own due time passes
    assert run_lockrun(any_env, "-n", "tick", "--every", "1h", "--", "true").returncode == 0
    right_end = lane("tick")[0].split("|")[1][-3:]
    assert "!" not in right_end


def test_missed_starts_of_a_schedule():
    from lockrun.views import timeline as tl
    from lockrun.views.timeline_missed import missed_starts

    since = datetime(2026, 12, 1, 0, 0, tzinfo=timezone.utc)
    window = tl.Window(since, since + timedelta(hours=6), since + timedelta(hours=6))
    hourly = Cadence(schedule="0 * * * *", tz="UTC", grace_s=120)
    starts = [f"2026-12-01T0{hour}:00:30.000000Z" for hour in (1, 2, 4)]  # 03:00 and 05:00 missed
    missed = missed_starts(hourly, starts, window)
    assert missed == ["2026-12-01T03:00:00.000000Z", "2026-12-01T05:00:00.000000Z"]
    every = Cadence(every_s=3600, grace_s=120)
    assert missed_starts(every, starts, window) == ["2026-12-01T03:00:30.000000Z", "2026-12-01T05:00:30.000000Z"]
    assert missed_starts(hourly, [], window) == []  # nothing known to count from


def test_a_name_paused_now_has_missed_nothing_since(any_env):
    assert run_lockrun(any_env, "-n", "tick", "--every", "1", "--grace", "0", "--", "true").returncode == 0
    assert run_lockrun(any_env, "pause", "tick", "--for", "1h").returncode == 0
    fleet = ["--fleet"] if "LOCKRUN_REDIS_URL" in any_env else []
    due = datetime.fromisoformat(every_name(any_env)["tick"]["next_due"][:-1]).replace(tzinfo=timezone.utc)
    # two due times past their grace: missed starts, but for the pause
    wait_until(lambda: datetime.now(timezone.utc) > due + timedelta(seconds=1.5), what="two due times to pass")
    result = run_lockrun(any_env, "timeline", "--since", "30s", "--width", "100", *fleet)
    lane = next(line for line in result.stdout.splitlines() if line.startswith("tick"))
    assert "!" not in lane.split("|")[1] and "missed start" not in result.stdout
    assert run_lockrun(any_env, "resume", "tick").returncode == 0
    wait_until(lambda: "!" in next(line for line in run_lockrun(
        any_env, "timeline", "--since", "30s", "--width", "100", *fleet).stdout.splitlines()
        if line.startswith("tick")).split("|")[1], what="the missed starts to show once resumed")
