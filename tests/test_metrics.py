"""`lockrun metrics` and `--metrics-file`: Prometheus text, parsed by a real exposition parser."""

from __future__ import annotations

import os

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lockrun.ledger.metrics import escape_label
from lockrun.ledger.store import Ledger, RunRecord
from tests.conftest import run_lockrun


@pytest.fixture
def env(any_env):
    return any_env


def samples(text: str) -> dict[tuple, float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_describe_every_lock(env):
    run_lockrun(env, "-n", "ok", "--", "true")
    run_lockrun(env, "-n", "ok", "--", "sh", "-c", "exit 4")
    run_lockrun(env, "-n", "ok", "--", "sleep", "0.2")
    result = run_lockrun(env, "metrics")
    assert result.returncode == 0, result.stderr
    got = samples(result.stdout)
    name = (("name", "ok"),)
    assert got[("lockrun_runs_total", (("name", "ok"), ("status", "succeeded")))] == 2
    assert got[("lockrun_runs_total", (("name", "ok"), ("status", "failed")))] == 1
    assert got[("lockrun_last_exit_code", name)] == 0
    assert 0.15 < got[("lockrun_last_duration_seconds", name)] < 30
    assert got[("lockrun_last_success_timestamp_seconds", name)] >= got[("lockrun_last_run_timestamp_seconds", name)]


def test_metrics_on_an_empty_ledger_are_families_without_samples(env):
    result = run_lockrun(env, "metrics")
    assert result.returncode == 0
    families = list(text_string_to_metric_families(result.stdout))
    assert {f.name for f in families} >= {"lockrun_last_run_timestamp_seconds", "lockrun_runs"}
    assert all(not f.samples for f in families)


def test_metrics_file_is_replaced_atomically_after_each_run(env, tmp_path):
    target = tmp_path / "textfile" / "lockrun.prom"
    target.parent.mkdir()
    assert run_lockrun(env, "-n", "m", "--metrics-file", str(target), "--", "true").returncode == 0
    first_inode = os.stat(target).st_ino
    assert samples(target.read_text())[("lockrun_runs_total", (("name", "m"), ("status", "succeeded")))] == 1
    assert run_lockrun(env, "-n", "m", "--metrics-file", str(target), "--", "false").returncode == 1
    assert os.stat(target).st_ino != first_inode  # a new file renamed over the old one
    assert samples(target.read_text())[("lockrun_runs_total", (("name", "m"), ("status", "failed")))] == 1
    assert sorted(p.name for p in target.parent.iterdir()) == ["lockrun.prom"]  # no temp file left


def test_metrics_file_from_the_config_is_checked_and_one_that_fails_at_the_end_only_warns(env, tmp_path):
    config = tmp_path / "m.toml"
    config.write_text(f'metrics_file = "{tmp_path}/nowhere/x.prom"\n')
    env["LOCKRUN_CONFIG"] = str(config)
    result = run_lockrun(env, "-n", "m", "--", "echo", "ran")  # refused before the command runs (contract §16)
    assert (result.returncode, result.stdout) == (78, "") and "does not exist" in result.stderr
    assert result.stderr.count("\n") == 1
    (tmp_path / "nowhere").mkdir()  # there when the run starts, gone when it ends: a warning, the run's code
    result = run_lockrun(env, "-n", "m", "--", "sh", "-c", f"rmdir {tmp_path}/nowhere; echo ran")
    assert (result.returncode, result.stdout) == (0, "ran\n")
    assert result.stderr.count("\n") == 1 and "metrics file" in result.stderr


def test_counters_survive_pruning(env, tmp_path):
    ledger = Ledger(tmp_path / "state" / "ledger.db").open()
    old = "2020-01-01T00:00:00.000000Z"
    ledger.start(RunRecord(run_id="old-run", name="p", command=["x"], backend="redis", started_at=old))
    ledger.finish("old-run", status="succeeded", ended_at=old, duration_s=1.0, exit_code=0)
    ledger.close()
    assert "pruned 1 run " in run_lockrun(env, "prune", "--older-than", "30d").stdout
    got = samples(run_lockrun(env, "metrics").stdout)
    assert got[("lockrun_runs_total", (("name", "p"), ("status", "succeeded")))] == 1  # counters never go back
    assert ("lockrun_last_run_timestamp_seconds", (("name", "p"),)) not in got  # but the run itself is gone


@pytest.mark.parametrize("raw,escaped", [('a"b', 'a\\"b'), ("a\\b", "a\\\\b"), ("a\nb", "a\\nb"), ("plain", "plain")])
def test_label_values_are_escaped(raw, escaped):
    assert escape_label(raw) == escaped
