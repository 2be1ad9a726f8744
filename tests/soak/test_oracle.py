"""The soak's oracle on hand-written MONITOR streams: it must see every broken promise it claims to."""

from __future__ import annotations

from tests.soak.oracle import reconstruct, reconstruct_across

LOCK, INFO, FENCE = "lockrun:{j}:lock", "lockrun:{j}:info", "lockrun:{j}:fence"


def q(*args) -> str:
    return " ".join(f'"{a}"' for a in args)


def grant(at: float, token: str, fence: int, run_id: str, ttl_ms: int = 1000) -> list[str]:
    return [
        f"+{at:.6f} [0 127.0.0.1:5000] " + q("EVALSHA", "sha", "5", LOCK, INFO, FENCE, "p", "s", token, ttl_ms),
        f"+{at:.6f} [0 lua] " + q("SET", LOCK, token, "NX", "PX", ttl_ms),
        f"+{at:.6f} [0 lua] " + q("TIME"),
        f"+{at:.6f} [0 lua] " + q("GET", FENCE),
        f"+{at:.6f} [0 lua] " + q("SET", FENCE, fence),
        f"+{at:.6f} [0 lua] " + q("HSET", INFO, "fencing_token", fence, "run_id", run_id),
    ]


def renew(at: float, token: str, ttl_ms: int = 1000) -> list[str]:
    return [
        f"+{at:.6f} [0 127.0.0.1:5000] " + q("EVALSHA", "sha", "3", LOCK, INFO, "p", token, ttl_ms, "hb", "1"),
        f"+{at:.6f} [0 lua] " + q("GET", LOCK),
        f"+{at:.6f} [0 lua] " + q("PEXPIRE", LOCK, ttl_ms),
    ]


def release(at: float, token: str) -> list[str]:
    return [
        f"+{at:.6f} [0 127.0.0.1:5000] " + q("EVALSHA", "sha", "3", LOCK, INFO, "w", token, "5000"),
        f"+{at:.6f} [0 lua] " + q("DEL", LOCK, INFO),
    ]


def test_a_clean_history_is_rebuilt_lease_by_lease():
    lines = grant(10.0, "aaa", 1, "r1") + renew(10.3, "aaa") + release(10.5, "aaa") + grant(10.6, "bbb", 2, "r2")
    out = reconstruct([(0, lines, 20.0)])
    assert out.violations == []
    first, second = out.leases
    assert (first.run_id, first.fencing_token, first.resets, first.end) == ("r1", 1, 1, "released")
    assert abs(first.deadline - 11.3) < 1e-6
    assert (second.run_id, second.fencing_token, second.end) == ("r2", 2, "expired")  # 11.6 < server death


def test_a_grant_while_the_previous_lease_is_valid_is_a_violation():
    out = reconstruct([(0, grant(10.0, "aaa", 1, "r1") + grant(10.5, "bbb", 2, "r2"), None)])
    assert len(out.violations) == 1 and "granted" in out.violations[0]


def test_a_grant_after_expiry_theft_or_death_is_fine():
    expired = grant(10.0, "aaa", 1, "r1") + grant(11.01, "bbb", 2, "r2")
    stolen = grant(10.0, "aaa", 1, "r1") + ["+10.2 [0 unix:/s] " + q("DEL", LOCK)] + grant(10.3, "bbb", 2, "r2")
    assert reconstruct([(0, expired, None)]).violations == []
    out = reconstruct([(0, stolen, None)])
    assert out.violations == [] and out.leases[0].end == "stolen"
    died = reconstruct([(0, grant(10.0, "aaa", 1, "r1"), 10.4), (1, grant(10.5, "bbb", 1, "r2"), None)])
    assert died.violations == [] and died.leases[0].end == "died"


def test_renewing_or_deleting_a_lease_one_does_not_hold_is_a_violation():
    assert "does not hold" in reconstruct([(0, grant(10.0, "aaa", 1, "r1") + renew(10.2, "zzz"), None)]).violations[0]
    assert "deleted" in reconstruct([(0, grant(10.0, "aaa", 1, "r1") + release(10.2, "zzz"), None)]).violations[0]
    resurrect = grant(10.0, "aaa", 1, "r1") + ["+10.1 [0 unix:/s] " + q("DEL", LOCK), "+10.2 [0 lua] " +
                                               q("SET", LOCK, "aaa", "PX", "1000")]
    assert "SET without NX" in reconstruct([(0, resurrect, None)]).violations[0]


RUNS = "lockrun:{j}:runs"


def release_with_record(at: float, token: str, run_id: str, status: str, fence: int, recorded: int = 1) -> list[str]:
    lines = [
        f"+{at:.6f} [0 127.0.0.1:5000] " + q("EVAL", "... record_end(...) return released", "3", LOCK, INFO, "w",
                                             token, "5000", "r", run_id, "s", status),
        f"+{at:.6f} [0 lua] " + q("DEL", LOCK, INFO),
    ]
    return lines + [f"+{at:.6f} [0 lua] " + q("XADD", RUNS, "MAXLEN", "~", "2000", "*", "r", run_id, "s", status,
                                              "f", fence)] * recorded


def _fleet_problems(lines: list[str], ledger: list[dict]) -> list[str]:
    from types import SimpleNamespace

    from tests.soak.harness import Soak

    soak = SimpleNamespace(history=ledger, fleet_ends_checked=0)
    return Soak._check_fleet_record(soak, reconstruct([(0, lines, None)]))


def test_the_fleet_check_sees_a_missing_a_doubled_and_a_wrong_end_event():
    row = {"run_id": "r1", "status": "succeeded", "fencing_token": 1}
    good = grant(10.0, "aaa", 1, "r1") + release_with_record(10.5, "aaa", "r1", "succeeded", 1)
    assert _fleet_problems(good, [row]) == []
    missing = grant(10.0, "aaa", 1, "r1") + release_with_record(10.5, "aaa", "r1", "succeeded", 1, recorded=0)
    assert "recorded 0 end events" in _fleet_problems(missing, [row])[0]
    doubled = grant(10.0, "aaa", 1, "r1") + release_with_record(10.5, "aaa", "r1", "succeeded", 1, recorded=2)
    assert any("2 end events" in p for p in _fleet_problems(doubled, [row]))
    wrong = grant(10.0, "aaa", 1, "r1") + release_with_record(10.5, "aaa", "r1", "failed", 1)
    assert "fleet end event says failed" in _fleet_problems(wrong, [row])[0]


# --- across servers: a master, its replicas, failovers (reconstruct_across) ---------------------------


def replicated_copy(at: float, token: str, ttl_ms: int = 1000) -> list[str]:
    """What a replica's MONITOR shows of a grant: its master's effects, over TCP, no lua lines."""
    return [
        f"+{at:.6f} [0 127.0.0.1:6379] " + q("MULTI"),
        f"+{at:.6f} [0 127.0.0.1:6379] " + q("SET", LOCK, token, "PXAT", int(at * 1000) + ttl_ms),
        f"+{at:.6f} [0 127.0.0.1:6379] " + q("EXEC"),
        f"+{at + 0.5:.6f} [0 127.0.0.1:6379] " + q("DEL", LOCK),  # even a replicated DEL is no theft
    ]


def test_a_lease_is_followed_across_a_failover_by_its_token():
    a = grant(10.0, "aaa", 100, "r1") + renew(10.3, "aaa")
    b = replicated_copy(10.0, "aaa") + renew(10.9, "aaa") + release(11.2, "aaa") + grant(11.3, "bbb", 200, "r2")
    out = reconstruct_across([(0, "a", a), (1, "b", b)])
    assert (out.violations, out.crossings, out.stale_renewals) == ([], [], 0)
    first, second = out.leases
    assert (first.run_id, first.resets, first.end, first.epoch) == ("r1", 2, "released", 0)
    assert abs(first.deadline - 11.9) < 1e-6 and second.epoch == 1


def test_a_lossy_failover_is_a_crossing_and_the_stale_master_renews_nothing():
    a = grant(10.0, "aaa", 100, "r1") + renew(10.6, "aaa")  # the renewal on the old master: stale
    b = grant(10.5, "bbb", 200, "r2")  # the promoted replica never saw aaa
    out = reconstruct_across([(0, "a", a), (1, "b", b)])
    assert out.violations == [] and out.stale_renewals == 1
    (crossing,) = out.crossings
    assert (crossing.earlier.run_id, crossing.later.run_id, crossing.earlier.end) == ("r1", "r2", "superseded")
    assert abs(crossing.earlier.deadline - 11.0) < 1e-6  # the stale renewal did not move it


def test_only_the_unix_thief_steals_and_unknown_tokens_are_violations():
    b = grant(10.0, "aaa", 100, "r1") + ["+10.2 [0 unix:/s] " + q("DEL", LOCK)]
    out = reconstruct_across([(0, "b", b)])
    assert out.leases[0].end == "stolen"
    assert "never granted" in reconstruct_across([(0, "b", renew(10.0, "zzz"))]).violations[0]
    late = grant(10.0, "aaa", 100, "r1") + renew(11.5, "aaa")
    assert "after its lease expired" in reconstruct_across([(0, "a", late)]).violations[0]


def test_the_fencing_check_spans_every_server_lifetime():
    from tests.soak.harness import Soak

    went_back = reconstruct([(0, grant(10.0, "aaa", 500, "r1"), 10.4), (1, grant(10.5, "bbb", 1, "r2"), None)])
    assert "must strictly increase across every lifetime" in Soak._check_fencing(went_back.leases)[0]
    kept_on = reconstruct([(0, grant(10.0, "aaa", 500, "r1"), 10.4), (1, grant(10.5, "bbb", 501, "r2"), None)])
    assert Soak._check_fencing(kept_on.leases) == []


def test_a_deadline_as_the_replicas_knew_it():
    a = grant(10.0, "aaa", 100, "r1") + renew(10.3, "aaa")
    both = replicated_copy(10.0, "aaa")[:3]
    only_c = both + ["+10.300500 [0 127.0.0.1:6379] " + q("PEXPIREAT", LOCK, 11300)]
    out = reconstruct_across([(0, "a", a), (1, "b", both), (2, "c", only_c)])
    (lease,) = out.leases
    assert abs(out.acknowledged_deadline(lease, 2) - 11.0) < 1e-6  # the grant reached both
    assert abs(out.acknowledged_deadline(lease, 1) - 11.3) < 1e-6  # the renewal reached c only
    assert abs(out.acknowledged_deadline(lease, 0) - 11.3) < 1e-6
    assert out.acknowledged_deadline(lease, 3) is None


def test_a_snapshot_counts_only_while_its_master_kept_its_data():
    a = grant(10.0, "aaa", 100, "r1")
    out = reconstruct_across([(0, "a", a)], snapshots=[(10.5, "b", "a"), (10.6, "c", "a")])
    assert abs(out.acknowledged_deadline(out.leases[0], 2) - 11.0) < 1e-6  # both full-synced from a after it
    replaced = reconstruct_across([(0, "a", a)], snapshots=[(10.2, "a", "b"), (10.5, "b", "a"), (10.6, "c", "a")])
    assert replaced.acknowledged_deadline(replaced.leases[0], 1) is None  # a's data was b's by then
