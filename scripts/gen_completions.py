"""Regenerate completions/ from the click app, exactly as the installed CLI prints them.

    python scripts/gen_completions.py           # write the files
    python scripts/gen_completions.py --check   # exit 1 if any file is stale

Each file is the output of ``_LOCKRUN_COMPLETE=<shell>_source lockrun``; the
scripts call back into ``lockrun`` at completion time, so they stay correct as
options change, but they are regenerated whenever click's templates do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = {"bash": "lockrun.bash", "zsh": "_lockrun", "fish": "lockrun.fish"}


def generate(shell: str) -> str:
    env = {**os.environ, "_LOCKRUN_COMPLETE": f"{shell}_source"}
    result = subprocess.run(
        [sys.executable, "-m", "lockrun"], env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return result.stdout


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for shell, filename in FILES.items():
        path = ROOT / "completions" / filename
        text = generate(shell)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
    if stale:
        print("stale completion files (run python scripts/gen_completions.py):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
