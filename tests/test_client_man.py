"""The man page as man-db and mandoc read it (contract §16): `mandoc -Tlint` finds nothing at all
(no warning, no style note), and .TH carries the version's date."""

from __future__ import annotations

import re
import subprocess
from datetime import date
from pathlib import Path

import lockrun
from tests.real_clients import program

PAGE = Path(__file__).resolve().parent.parent / "man" / "lockrun.1"


def test_mandoc_lint_finds_nothing():
    mandoc = program("mandoc", "mandoc")
    result = subprocess.run([mandoc, "-Tlint", "-W", "all", str(PAGE)], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout + result.stderr) == (0, ""), result.stdout + result.stderr


def test_mandoc_finds_what_it_should(tmp_path):
    """The check has teeth: the issue's findings (no date, .PP after .SH) are reported."""
    mandoc = program("mandoc", "mandoc")
    bad = tmp_path / "bad.1"
    bad.write_text('.TH X 1 "" "x" "User Commands"\n.SH NAME\n.PP\nx \\- y\n')
    result = subprocess.run([mandoc, "-Tlint", str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "missing date" in result.stdout + result.stderr


def test_the_title_line_carries_the_release_date():
    first = next(line for line in PAGE.read_text().splitlines() if line.startswith(".TH "))
    match = re.fullmatch(r'\.TH LOCKRUN 1 "(\d{4}-\d{2}-\d{2})" "lockrun ([^"]+)" "User Commands"', first)
    assert match and match[1] == lockrun.__date__ and match[2] == lockrun.__version__, first
    date.fromisoformat(match[1])
