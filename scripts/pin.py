"""Refresh the pin files CI installs from, so that no release elsewhere can change a CI result.

    python scripts/pin.py            # rewrite .ci/requirements.txt and .ci/requirements-oldest.txt
    python scripts/pin.py --check    # exit 1 if either no longer covers pyproject.toml (offline)

Both files are written by uv (`uv pip compile`, in the test extra), with a hash for every file:

- ``.ci/requirements.txt``: the project's runtime dependencies, its ``test`` and ``hiredis``
  extras and the build backend, each at one exact version, for every Python lockrun supports
  (``--universal``: one file, environment markers where versions differ). CI installs it with
  ``pip install --require-hashes`` and then lockrun itself with ``--no-deps``.
- ``.ci/requirements-oldest.txt``: the oldest Python that ``requires-python`` admits, with every
  runtime dependency at its declared lower bound (``click>=8.1`` becomes ``click==8.1``) and what
  the unit layer and the smoke test need to run. CI's "oldest" leg installs it.

The "newest" leg installs from neither: it upgrades the runtime dependencies past these pins.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # the test extra brings tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PINS = ROOT / ".ci" / "requirements.txt"
OLDEST = ROOT / ".ci" / "requirements-oldest.txt"
# What the oldest leg runs besides lockrun: the unit layer and tests/test_smoke.py.
OLDEST_TOOLS = ("pytest", "pytest-timeout", "hypothesis")
EXTRAS = ("test", "hiredis")
LOWER_BOUND = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)\s*(;.*)?$")


def project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as file:
        return tomllib.load(file)["project"]


def oldest_python(meta: dict) -> str:
    found = re.fullmatch(r">=\s*(3\.\d+)", meta["requires-python"].strip())
    if not found:
        sys.exit(f"pin: requires-python {meta['requires-python']!r} is not of the form '>=3.N'")
    return found.group(1)


def lower_bounds(meta: dict) -> list[str]:
    """Each runtime dependency at its declared lower bound: ``click>=8.1`` -> ``click==8.1``."""
    pinned = []
    for requirement in meta["dependencies"]:
        found = LOWER_BOUND.match(requirement)
        if not found:
            sys.exit(f"pin: dependency {requirement!r} has no plain '>=' lower bound to test")
        name, version, marker = found.groups()
        pinned.append(f"{name}=={version}{' ' + marker if marker else ''}")
    return pinned


def uv() -> str:
    found = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if not found:
        sys.exit("pin: uv is not installed (it is in the test extra: pip install -e '.[test]')")
    return found


def compile_pins(inputs: list[Path], output: Path, *args: str) -> None:
    command = [uv(), "pip", "compile", "--quiet", "--generate-hashes", "--no-header", "--index-url",
               "https://pypi.org/simple", *args, *(str(path) for path in inputs), "-o", str(output)]
    subprocess.run(command, check=True, cwd=ROOT)
    header = (f"# Written by `python scripts/pin.py` (README \"Running the tests\"); do not edit.\n"
              f"# {' '.join(['uv pip compile', *args])}\n")
    output.write_text(header + output.read_text())


def refresh() -> None:
    meta = project()
    with tempfile.TemporaryDirectory() as tmp:
        build = Path(tmp) / "build.in"
        # The build backend too: CI installs lockrun with --no-build-isolation from these pins.
        build.write_text("\n".join(build_requires()) + "\n")
        extras = [arg for extra in EXTRAS for arg in ("--extra", extra)]
        compile_pins([ROOT / "pyproject.toml", build], PINS, "--universal", *extras)
        oldest = Path(tmp) / "oldest.in"
        oldest.write_text("\n".join([*lower_bounds(meta), *OLDEST_TOOLS, *build_requires()]) + "\n")
        compile_pins([oldest], OLDEST, "--python-version", oldest_python(meta))
    print(f"pin: wrote {PINS.relative_to(ROOT)} and {OLDEST.relative_to(ROOT)}")


def build_requires() -> list[str]:
    """The build backend, and what hatchling asks for besides to build an editable install."""
    with open(ROOT / "pyproject.toml", "rb") as file:
        return [*tomllib.load(file)["build-system"]["requires"], "editables"]


def pinned_names(path: Path) -> set[str]:
    return {normalize(line.split("==")[0]) for line in path.read_text().splitlines() if "==" in line
            and not line.startswith((" ", "#"))}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower().strip()


def check() -> int:
    """Offline: every dependency pyproject.toml names is pinned, and the oldest file pins the bounds."""
    meta = project()
    wanted = {normalize(re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0]) for dep in meta["dependencies"]}
    for extra in EXTRAS:
        wanted |= {normalize(re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0])
                   for dep in meta["optional-dependencies"][extra]}
    missing = sorted(wanted - pinned_names(PINS))
    oldest_text = OLDEST.read_text()
    stale = [pin for pin in lower_bounds(meta) if pin.split(" ;")[0] not in oldest_text]
    for problem in [*(f"{name} is not pinned in {PINS.name}" for name in missing),
                    *(f"{pin} is not in {OLDEST.name}" for pin in stale)]:
        print(f"pin: {problem}; run python scripts/pin.py", file=sys.stderr)
    return 1 if missing or stale else 0


if __name__ == "__main__":
    if "--check" in sys.argv[1:]:
        sys.exit(check())
    refresh()
