"""``lockrun doctor``'s judgement of the deployment (a server, Sentinels, a Cluster) and of the
live probe (docs/operating.md "Checking the setup: lockrun doctor")."""

from __future__ import annotations

from lockrun.backends.audit import ClusterFacts, ProbeFacts, SentinelFacts, Topology, Unread
from lockrun.backends.values import RENEWED
from lockrun.views.doctor_check import FAIL, OK, WARN, Check, duration_text, said

#: A hand-over slower than this was not woken by the release (it waited for the lease to run out).
HANDOVER_WOKEN_S = 0.5
#: The slots of a Redis Cluster.
CLUSTER_SLOTS = 16384


def topology_check(found: Topology, servers: int) -> Check:
    if found.sentinel is not None:
        return _sentinel_check(found.sentinel)
    if found.cluster is not None:
        return _cluster_check(found.cluster)
    return Check("topology", OK, "a single server" if servers == 1 else f"{servers} servers")


def _sentinel_check(facts: SentinelFacts) -> Check:
    seen = _sentinels_seen(facts)
    if len(facts.masters) > 1:
        return Check("topology", FAIL, f"{seen}: the Sentinels name different masters (a failover under way, or"
                                       " a split): two masters could each grant a lock",
                     "find out why the Sentinels disagree (SENTINEL MASTERS on each) before trusting locks")
    if "down" in facts.flags:
        return Check("topology", WARN, f"{seen}; the Sentinels see the master as {said(facts.flags, 60)}",
                     "bring the master back, or let the Sentinels fail over")
    if facts.silent:
        who = "; ".join(f"{where}: {said(why, 80)}" for where, why in facts.silent)
        return Check("topology", WARN, f"{seen} ({who})",
                     "start the Sentinels that do not answer, or take them out of the URL")
    if _too_few_for_the_quorum(facts):
        return Check("topology", WARN, f"{seen}, but they know {facts.sentinels_known} Sentinels: too few to"
                                       " agree on a failover", "run at least as many Sentinels as the quorum")
    return Check("topology", OK, seen)


def _too_few_for_the_quorum(facts: SentinelFacts) -> bool:
    return facts.quorum is not None and facts.sentinels_known is not None and facts.sentinels_known < facts.quorum


def _sentinels_seen(facts: SentinelFacts) -> str:
    answering = len(facts.given) - len(facts.silent)
    quorum = f", quorum {facts.quorum}" if facts.quorum is not None else ""
    replicas = "" if facts.replicas is None else f", {facts.replicas} replica{'s' if facts.replicas != 1 else ''}"
    return (f"Sentinel service {facts.service}: master {', '.join(facts.masters) or '?'}; {answering} of"
            f" {len(facts.given)} Sentinels in the URL answer{quorum}{replicas}")


def _cluster_check(cluster: ClusterFacts) -> Check:
    masters = len(cluster.masters)
    # Replicas are judged by each master (INFO replication): the slot map lists them late.
    seen = f"Redis Cluster: {masters} master{'s' if masters != 1 else ''} ({', '.join(cluster.masters)})"
    if isinstance(cluster.state, Unread):
        return Check("topology", WARN, f"{seen}; could not read its state (CLUSTER INFO:"
                                       f" {said(cluster.state.why)})", "let lockrun's user run CLUSTER INFO")
    if cluster.state != "ok" or (cluster.slots_ok is not None and cluster.slots_ok < CLUSTER_SLOTS):
        slots = f", {cluster.slots_ok} of {CLUSTER_SLOTS} slots ok" if cluster.slots_ok is not None else ""
        return Check("topology", FAIL, f"{seen}; cluster_state {said(cluster.state, 20)}{slots}: names whose slots"
                                       " have no master fail (exit 69)",
                     "give every slot a master (redis-cli --cluster check, --cluster fix)")
    return Check("topology", OK, f"{seen}; cluster_state ok, {CLUSTER_SLOTS} slots ok; each master is checked"
                                 " below")


def probe_check(facts: ProbeFacts | None) -> Check:
    if facts is None:
        return Check("probe", OK, "nothing to try live: local locks are this host's kernel locks, and the checks above"
                                  " cover their directory")
    broken = _probe_broken(facts)
    return broken if broken is not None else _probe_worked(facts)


def _probe_broken(facts: ProbeFacts) -> Check | None:
    """The FAIL of a probe that raised, saw something a lock must not do, or left keys behind."""
    name, left = f"{facts.scratch}{{probe}}", _left_text(facts)
    if facts.failure:
        return Check("probe", FAIL, f"on {name}: {said(facts.failure, 400)}{left}",
                     _cleanup_fix(facts) if facts.left else _failure_fix(facts.failure, facts.scratch))
    if facts.contender == "acquired":
        return Check("probe", FAIL, f"on {name}: a second holder took the lock while the first held it{left}",
                     "do not use this server for locks: it does not keep SET NX (a proxy that shards or replays?)")
    if facts.renewal != RENEWED:
        return Check("probe", FAIL, f"on {name}: the holder's renewal found its lease {facts.renewal or '?'}{left}",
                     "see the checks above (eviction, a proxy, the clock)")
    if not _fence_increased(facts):
        return Check("probe", FAIL, f"on {name}: the fencing token did not increase ({facts.first_fence} then"
                                    f" {facts.second_fence}){left}", "see the checks above")
    if facts.left:
        return Check("probe", FAIL, f"on {name}: the lease operations work, but the probe could not remove"
                                    f" {', '.join(facts.left)}", _cleanup_fix(facts))
    return None


def _fence_increased(facts: ProbeFacts) -> bool:
    """The second holder's fencing token is greater than the first's."""
    return facts.first_fence is not None and facts.second_fence is not None and facts.second_fence > facts.first_fence


def _left_text(facts: ProbeFacts) -> str:
    return f"; what it wrote may be left: {', '.join(facts.left)}" if facts.left else ""


def _cleanup_fix(facts: ProbeFacts) -> str:
    return (f"look, with a client that may, and remove what is there: redis-cli --scan --pattern"
            f" '{facts.scratch}*' | xargs redis-cli del")


def _failure_fix(failure: str, scratch: str) -> str:
    if "no permissions to access" in failure:
        prefix = scratch[: scratch.rfind("doctor:")]
        return (f"let lockrun's user use every key under its prefix (ACL SETUSER USER ~{prefix}*): that covers"
                f" every key a run writes, and the probe's ({scratch}…)")
    return "see the checks above; lockrun's runs would fail the same way"


def _probe_worked(facts: ProbeFacts) -> Check:
    """OK, or a WARN when the waiter was not woken by the release."""
    handover = facts.handover_s if facts.handover_s is not None else 0.0
    seen = (f"two holders of {facts.scratch}{{probe}}: the second was refused while the first held, the first"
            f" renewed, then released and the second took over in {duration_text(handover)} with a higher fencing"
            f" token ({facts.first_fence} then {facts.second_fence}); {len(facts.written)} keys written and"
            f" removed{_dbsize_text(facts)}")
    if handover > HANDOVER_WOKEN_S:
        return Check("probe", WARN, f"{seen}: the waiter was not woken by the release (it waited for the"
                                    f" {facts.ttl_s:g}s lease to run out), so --wait costs up to a TTL",
                     "let lockrun's user run BLPOP and LPUSH on its keys; a proxy must pass BLPOP through")
    return Check("probe", OK, seen)


def _dbsize_text(facts: ProbeFacts) -> str:
    if facts.keys_before is None:
        return ""
    if facts.keys_before == facts.keys_after:
        return f"; DBSIZE {facts.keys_before} before and {facts.keys_after} after"
    return (f"; DBSIZE {facts.keys_before} before, {facts.keys_after} after (other clients wrote meanwhile; none of"
            " the probe's keys is left)")
