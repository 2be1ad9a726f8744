"""The short failover soak CI runs; the ten-seed one is ``python -m tests.soak --failover --runs 10``.

LOCKRUN_FAILOVER_SOAK_SEED and LOCKRUN_FAILOVER_SOAK_SECONDS override the seed and the length.
"""

from __future__ import annotations

import gc
import os
import shutil

import pytest

from tests.conftest import REDIS_SERVER
from tests.soak.failover import FAILOVERS, GROUPS, run_failover_soak

SEED = int(os.environ.get("LOCKRUN_FAILOVER_SOAK_SEED", "20261201"))
SECONDS = float(os.environ.get("LOCKRUN_FAILOVER_SOAK_SECONDS", "120"))


@pytest.mark.soak
@pytest.mark.timeout(SECONDS + 360)
def test_replicas_keep_leases_across_failovers(tmp_path):
    if not REDIS_SERVER or not shutil.which("redis-server"):
        pytest.fail("redis-server is not installed (apt-get install redis-server); .ci/run installs it")
    soak, problems = run_failover_soak(SEED, SECONDS, tmp_path)
    gc.collect()  # a socket or event loop the harness leaked fails this test, not a later one
    print(soak.summary())
    replay = f"seed {SEED}: replay with python -m tests.soak --failover --seed {SEED} --duration {SECONDS:g}"
    assert not problems, replay + "\n" + "\n".join(problems[:30]) + "\nfaults:\n" + soak.fault_log()
    # Zero overlaps with --replicas 2 and all (every replica), and every --replicas 1 overlap
    # explained, are checked above; the soak proves something only if failovers happened...
    done = {fault.kind for fault in soak.faults if not fault.detail.startswith(("no holder", "failed"))}
    assert set(FAILOVERS) <= done, f"{replay}: failovers that never happened: {set(FAILOVERS) - done}"
    # ...runs of every group got through them...
    for group in GROUPS:
        codes = {inv.rc for inv in soak.invocations if inv.name == f"r{group}-job"}
        assert 0 in codes, f"{replay}: no --replicas {group} run succeeded: {codes}"
    # ...and the checker caught what those failovers do without --replicas: commands of one name
    # running at once, or at least the server granting a name over a lease still valid (in ten
    # seeds of this length, --replicas 0 overlapped 3 to 10 times each).
    assert soak.overlaps["0"] + soak.crossings["0"] > 0, \
        f"{replay}: --replicas 0 never overlapped: the checker was not shown to catch anything"
