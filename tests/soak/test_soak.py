"""The short fault soak CI runs; the long one is ``python -m tests.soak`` (see README, "Testing").

LOCKRUN_SOAK_SEED and LOCKRUN_SOAK_SECONDS override the seed and the length.
"""

from __future__ import annotations

import gc
import os

import pytest

from tests.conftest import REDIS_SERVER
from tests.soak.harness import FAULTS, run_soak

SEED = int(os.environ.get("LOCKRUN_SOAK_SEED", "20261129"))
SECONDS = float(os.environ.get("LOCKRUN_SOAK_SECONDS", "45"))


@pytest.mark.soak
@pytest.mark.timeout(SECONDS + 240)
def test_short_fault_soak_keeps_every_promise(tmp_path):
    if not REDIS_SERVER:
        pytest.fail("redis-server is not installed (apt-get install redis-server); .ci/run installs it")
    soak, problems = run_soak(SEED, SECONDS, tmp_path)
    gc.collect()  # a socket or event loop the harness leaked fails this test, not a later one
    print(soak.summary())
    replay = f"seed {SEED}: replay with python -m tests.soak --seed {SEED} --duration {SECONDS:g}"
    assert not problems, replay + "\n" + "\n".join(problems[:30]) + "\nfaults:\n" + soak.fault_log()
    # The soak proves something only if the faults happened and runs got through them.
    done = {fault.kind for fault in soak.faults if not fault.detail.startswith(("no holder", "failed"))}
    assert done == set(FAULTS), f"{replay}: faults that never happened: {set(FAULTS) - done}"
    codes = {inv.rc for inv in soak.invocations}
    assert {0, 76} <= codes, f"{replay}: exit codes {codes}"
    assert len(soak.epochs) > 1, replay
    assert soak.fleet_ends_checked > 0, f"{replay}: no fleet end event was checked against the ledger"
