"""One syntax for time (README "Ranges"): every seconds and duration value takes a bare number of
seconds or a number with a unit (90, 90s, 2m, 1.5h, 7d), in flags, the environment and the config
file alike; every --since takes what timeline --since takes."""

from __future__ import annotations

import json

import pytest

from tests.conftest import history, run_lockrun
from tests.test_input import assert_one_line


def lease_ttl_ms(env, tmp_path, *args: str) -> int:
    """The TTL a run's lease was taken with, as its holder description in the state directory says."""
    description = tmp_path / "state" / "locks" / "ttl.json"
    result = run_lockrun(env, "-n", "ttl", *args, "--", "cat", str(description))
    assert result.returncode == 0, result.stderr
    return int(json.loads(result.stdout)["ttl_ms"])


@pytest.mark.parametrize("given,ms", [("90", 90_000), ("90s", 90_000), ("2m", 120_000), ("1.5h", 5_400_000),
                                      ("7d", 604_800_000)])
def test_ttl_takes_seconds_or_a_unit_as_flag_environment_and_config(local_env, tmp_path, given, ms):
    assert lease_ttl_ms(local_env, tmp_path, "--ttl", given) == ms
    assert lease_ttl_ms({**local_env, "LOCKRUN_TTL": given}, tmp_path) == ms
    config = tmp_path / "config.toml"
    config.write_text(f'ttl = "{given}"\n')
    assert lease_ttl_ms(local_env, tmp_path) == ms
    if given.isdigit():
        config.write_text(f"ttl = {given}\n")  # a TOML number, as before
        assert lease_ttl_ms(local_env, tmp_path) == ms


@pytest.mark.parametrize("config_text", ["", "min_hold = 30", 'min_hold = "30"', 'min_hold = "0.5m"'])
def test_min_hold_takes_a_bare_number_of_seconds(local_env, tmp_path, config_text):
    (tmp_path / "config.toml").write_text(config_text + "\n")
    flag = ["--min-hold", "30"] if not config_text else []
    assert run_lockrun(local_env, "-n", "cool", *flag, "--", "true").returncode == 0
    (lock,) = json.loads(run_lockrun(local_env, "status", "--json").stdout)["locks"]
    assert (lock["name"], lock["state"]) == ("cool", "cooling")
    assert 0 < lock["ttl_remaining_s"] <= 30
    assert run_lockrun(local_env, "-n", "cool", "--", "true").returncode == 75  # still cooling


def test_timeout_and_kill_after_take_units(local_env):
    result = run_lockrun(local_env, "-n", "slow", "--timeout", "0.02m", "--kill-after", "1s", "--", "sleep", "60")
    assert result.returncode == 124, result.stderr
    assert [r["status"] for r in history(local_env, "slow")] == ["timeout"]


@pytest.mark.parametrize("args,needles", [
    (["--ttl", "2x"], ["--ttl", "'2x'", "seconds (90) or a number with a unit s, m, h or d", "at least 1s"]),
    (["--ttl", "0.5"], ["at least 1s and at most 365d"]),
    (["--wait", "366d"], ["--wait", "0 or more and at most 365d"]),
    (["--min-hold", "0"], ["--min-hold", "more than 0 and at most 365d"]),
    (["--kill-after", "1 m"], ["--kill-after"]),
])
def test_a_time_out_of_range_or_misspelt_is_one_line(local_env, args, needles):
    assert_one_line(run_lockrun(local_env, "-n", "x", *args, "--", "true"), 2, *needles)


def test_a_time_in_the_config_file_out_of_range_is_78(local_env, tmp_path):
    config = tmp_path / "config.toml"
    for text, needle in [('ttl = "2y"', "ttl must be seconds (90) or a duration string"),
                         ("socket_timeout = 301", "more than 0 and at most 5m"),
                         ('min_hold = "366d"', "min_hold must be")]:
        config.write_text(text + "\n")
        assert_one_line(run_lockrun(local_env, "-n", "x", "--", "true"), 78, str(config), needle)


@pytest.mark.parametrize("since", ["yesterday", "90", "90m", "1.5h", "7d", "2020-01-01", "2020-01-01T00:00:00Z"])
def test_history_since_takes_what_timeline_since_takes(local_env, since):
    assert run_lockrun(local_env, "-n", "past", "--", "true").returncode == 0
    result = run_lockrun(local_env, "history", "--since", since, "--json")
    assert result.returncode == 0, result.stderr
    assert [row["name"] for row in json.loads(result.stdout)] == ["past"]
    assert run_lockrun(local_env, "timeline", "--since", since).returncode == 0


def test_history_since_a_time_still_to_come_finds_nothing(local_env):
    assert run_lockrun(local_env, "-n", "past", "--", "true").returncode == 0
    assert json.loads(run_lockrun(local_env, "history", "--since", "9000-01-01", "--json").stdout) == []
    assert history(local_env, "--since", "1h") != []


def test_history_fleet_since_yesterday(env):
    assert run_lockrun(env, "-n", "fleet-past", "--", "true").returncode == 0
    result = run_lockrun(env, "history", "--fleet", "--since", "yesterday", "--json")
    assert result.returncode == 0, result.stderr
    assert [row["name"] for row in json.loads(result.stdout)] == ["fleet-past"]
    future = run_lockrun(env, "history", "--fleet", "--since", "9000-01-01", "--json")
    assert json.loads(future.stdout) == []


def test_prune_older_than_takes_a_bare_number_of_seconds(local_env):
    assert run_lockrun(local_env, "-n", "old", "--", "true").returncode == 0
    result = run_lockrun(local_env, "prune", "--older-than", "3600")
    assert result.returncode == 0 and result.stdout.startswith("pruned 0 runs older than 1h"), result.stdout
