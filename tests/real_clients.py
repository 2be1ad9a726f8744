"""The real programs on the other end of lockrun's integrations (docs/development.md "The real
clients"): promtool, node_exporter, rsyslogd, bash with bash-completion, zsh, fish, mandoc.

A test that needs one calls :func:`program`. Where it is missing the test is skipped on a
developer's machine, and FAILS where ``LOCKRUN_REQUIRE_CLIENTS=1`` (CI: ``.ci/run`` installs
them from Debian's packages and sets it), so CI can never pass by skipping them.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

REQUIRED = os.environ.get("LOCKRUN_REQUIRE_CLIENTS") == "1"


def program(name: str, package: str, *places: str) -> str:
    """The path of ``name`` (on PATH, else at one of ``places``), or skip/fail naming the package."""
    found = shutil.which(name) or next((place for place in places if os.access(place, os.X_OK)), None)
    if found:
        return found
    missing(name, package)


def data_file(path: str, package: str) -> str:
    """A file a package installs (bash-completion's loader), or skip/fail naming the package."""
    if os.path.exists(path):
        return path
    missing(path, package)


def missing(what: str, package: str) -> NoReturn:
    message = f"{what} is not installed (apt-get install {package}); .ci/run installs it"
    if REQUIRED:
        pytest.fail(f"{message}, and LOCKRUN_REQUIRE_CLIENTS=1 says it must be tested")
    pytest.skip(message)


def readme_command(needle: str, document: str = "README.md") -> str:
    """The command of the one crontab line in ``document`` whose command holds ``needle``: the tests
    of the integrations run the lines people copy (tests/readme_crontab.py reads them)."""
    from tests.readme_crontab import crontab_lines

    found = [line.command for line in crontab_lines() if line.document == document and needle in line.command]
    assert len(found) == 1, f"{document} should have one crontab line with {needle!r}, has {found}"
    return found[0]


def shell_words(command: str, replacements: dict[str, str]) -> list[str]:
    """A documented command line as argv, its placeholders made the test's (as cron's sh would split it)."""
    import shlex

    for old, new in replacements.items():
        command = command.replace(old, new)
    return shlex.split(command)
