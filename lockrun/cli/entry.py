"""The ``lockrun`` command's entry point: the collector held off before anything is imported.

Kept apart from ``main`` so that holding the collector off comes before click and the rest load
(system/collection.py says why); a run resumes it once its backend is open, and the read
commands, which end in moments, leave it off.
"""

from __future__ import annotations


def main() -> None:
    from lockrun.system.collection import hold_for_startup

    hold_for_startup()
    from lockrun.cli.main import main as run_command_line

    run_command_line()
