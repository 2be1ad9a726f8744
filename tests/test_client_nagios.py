"""`lockrun check` as the Nagios plugin API asks (contract §16; docs/operating.md "Monitoring:
lockrun check"): nothing to judge is UNKNOWN, never a silent OK; `--json` is JSON and nothing
else; every name judged has perfdata in the guidelines' form, ``U`` where no success is known."""

from __future__ import annotations

import json
import re

from tests.conftest import run_lockrun

# The Nagios plugin guidelines ("Performance data"): 'label'=value[UOM];[warn];[crit];[min];[max],
# value in [-0-9.] or the literal U; a label quoted when it has a space, never holding = or '.
PERF_ITEM = re.compile(r"(?:'[^'=]+'|[^'= ]+)=(?:-?[0-9.]+(?:us|ms|s|%|B|KB|MB|TB|c)?|U)"
                       r"(?:;(?:-?[0-9.]*)){0,4}")


def perf_items(line: str) -> list[str]:
    _, bar, data = line.partition(" | ")
    items = data.split(" ") if bar else []
    assert all(PERF_ITEM.fullmatch(item) for item in items), items
    return items


def test_nothing_to_judge_is_unknown_and_says_where_it_looked(any_env, tmp_path):
    result = run_lockrun(any_env, "check")
    assert result.returncode == 3, result
    assert result.stdout.startswith("LOCKRUN UNKNOWN - nothing to check: ") and result.stdout.count("\n") == 1
    assert str(tmp_path / "state") in result.stdout and result.stderr == ""
    shown = run_lockrun(any_env, "check", "--json")
    assert shown.returncode == 3 and json.loads(shown.stdout)["status"] == "UNKNOWN"


def test_json_is_json_only_and_a_name_without_success_has_U(any_env):
    assert run_lockrun(any_env, "-n", "never-ok", "--", "false").returncode == 1
    assert run_lockrun(any_env, "-n", "fine", "--every", "1h", "--", "true").returncode == 0
    text = run_lockrun(any_env, "check").stdout
    first = text.splitlines()[0]
    assert first.startswith("LOCKRUN CRITICAL - never-ok last run failed")
    items = perf_items(first)
    assert re.fullmatch(r"fine_age=\d+s;;3900;0", items[0]) and items[1] == "never-ok_age=U;;;0", items
    result = run_lockrun(any_env, "check", "--json")
    assert result.returncode == 2
    report = json.loads(result.stdout)  # the whole of stdout: no perfdata after it
    assert result.stdout.strip().endswith("}") and "|" not in report["summary"]
    assert report["summary"].startswith("LOCKRUN CRITICAL - never-ok last run failed")
    assert [item.split("=")[0] for item in perf_items(f"x | {report['perfdata']}")] == ["fine_age", "never-ok_age"]
    assert [name["name"] for name in report["names"]] == ["fine", "never-ok"]
