"""The import rules say who may see what (pyproject.toml [tool.importlinter], docs/internals.md "The
house"): each import the design forbids, added to a copy of the package, makes `lint-imports` fail
naming the contract it breaks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")

FORBIDDEN = [
    ("render/tables.py", "import lockrun.run.runner", "render/ sees only views/ and core/"),
    ("render/tables.py", "import lockrun.backends.redis.client", "Outside backends/, only the backend protocol"),
    ("views/status.py", "import lockrun.backends.redis.scripts", "Outside backends/, only the backend protocol"),
    ("views/status.py", "from lockrun.backends.redis.backend import RedisBackend",
     "Outside backends/, only the backend protocol"),
    ("cli/locks.py", "import lockrun.backends.redis.scripts", "Outside backends/, only the backend protocol"),
    ("config/settings.py", "import lockrun.backends.redis.client", "config/ sees only system/ and core/"),
    ("config/settings.py", "import lockrun.ledger.store", "config/ sees only system/ and core/"),
    ("config/state_home.py", "import lockrun.backends.local.files", "config/ sees only system/ and core/"),
    ("backends/connect.py", "import redis", "Only backends/redis/ imports redis-py"),
    ("run/runner.py", "import lockrun.backends.redis.keys", "Outside backends/, only the backend protocol"),
    ("run/runner.py", "import click", "Only cli/ imports click"),
    ("views/check.py", "import rich", "Only render/ imports rich"),
    ("api/block.py", "import lockrun.views.status", "The Python API (api/) imports neither"),
    ("backends/local/backend.py", "import lockrun.backends.redis.keys", "The two backends know nothing"),
]


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    if LINT_IMPORTS is None:
        pytest.fail("lint-imports is not installed (it is in the test extra)")
    where = tmp_path_factory.mktemp("contracts")
    shutil.copytree(ROOT / "lockrun", where / "lockrun", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", where / "pyproject.toml")
    return where


def lint(where: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(where)}
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=where, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_package_keeps_every_contract(copy):
    result = lint(copy)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("module,line,contract", FORBIDDEN, ids=[f"{m}:{line}" for m, line, _ in FORBIDDEN])
def test_each_forbidden_import_breaks_its_contract(copy, module, line, contract):
    path = copy / "lockrun" / module
    kept = path.read_text()
    try:
        path.write_text(f"{kept}\n{line}  # noqa\n")
        result = lint(copy)
    finally:
        path.write_text(kept)
    assert result.returncode != 0, f"lint-imports kept every contract with {module}: {line}"
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in " ".join(broken.split()), result.stdout
