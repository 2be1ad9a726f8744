"""The eviction soak CI runs (tests/soak/eviction.py); by hand: ``python -m tests.soak --eviction``.

LOCKRUN_EVICTION_SOAK_SEED and LOCKRUN_EVICTION_SOAK_SECONDS override the seed and the length.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import REDIS_SERVER
from tests.soak.eviction import run_eviction_soak

SEED = int(os.environ.get("LOCKRUN_EVICTION_SOAK_SEED", "20261201"))
SECONDS = float(os.environ.get("LOCKRUN_EVICTION_SOAK_SECONDS", "30"))


@pytest.mark.soak
@pytest.mark.timeout(SECONDS + 240)
def test_an_lru_server_filled_mid_hold_overlaps_nothing(tmp_path):
    if not REDIS_SERVER:
        pytest.fail("redis-server is not installed (apt-get install redis-server); .ci/run installs it")
    soak, problems = run_eviction_soak(SEED, SECONDS, tmp_path)
    print(soak.summary())
    replay = f"seed {SEED}: replay with python -m tests.soak --eviction --seed {SEED} --duration {SECONDS:g}"
    assert not problems, replay + "\n" + "\n".join(problems[:30]) + "\nfaults:\n" + soak.fault_log()
    # It proves something only if held locks were evicted and runs were refused meanwhile.
    assert soak.windows and soak.evicted_keys > 0, f"{replay}: nothing was evicted\n{soak.fault_log()}"
    assert soak.lost_holds > 0, f"{replay}: no holder found its lock evicted\n{soak.fault_log()}"
    assert soak.refused > 0, f"{replay}: no run was refused while the server evicted"
    assert any(inv.rc == 0 for inv in soak.invocations), replay
