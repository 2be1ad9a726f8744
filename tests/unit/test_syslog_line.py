"""--syslog's line: key=value fields that always split on spaces (docs/operating.md "Output")."""

from __future__ import annotations

from lockrun.run.syslog_line import field_value, run_line


def test_the_line_names_every_field_in_order() -> None:
    row = {"name": "report", "run_id": "3f2a", "status": "failed", "exit_status": 3, "duration_s": 12.5,
           "host": "app-1", "note": "not in the line"}
    assert run_line(row, attempt=2) == (
        "name=report run_id=3f2a status=failed exit_status=3 duration_s=12.5 host=app-1 attempt=2")


def test_odd_values_are_quoted_and_escaped_and_missing_ones_are_a_dash() -> None:
    assert field_value(None) == "-"
    assert field_value(0.000123) == "0.000123"
    assert field_value("a b") == '"a b"'
    assert field_value('say "hi"\\') == '"say \\"hi\\"\\\\"'
    assert field_value("line\nbreak\x7f") == '"line\\x0abreak\\x7f"'
    assert field_value("") == '""'
    line = run_line({"name": "x y", "host": "evil\nname=forged"}, attempt=1)
    assert "\n" not in line and line.count("name=") == 2  # the forged key is inside quotes
    assert line.split(" host=")[1].startswith('"evil\\x0aname=forged"')
