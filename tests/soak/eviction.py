"""The eviction fault: the soak's server turned into an evicting cache mid-hold, then filled.

README "A Redis that evicts keys": with ``maxmemory`` set and an evicting policy, a held lock
can vanish. lockrun cannot stop Redis evicting, but it refuses to grant anything while the
server may evict, and a holder whose key was evicted finds out at its next renewal. So an
evicting window produces no overlap as long as the server keeps saying it evicts until every
holder has renewed once (this soak waits the longest TTL after the last eviction before it
switches back to ``noeviction``; README "Known limits" says what a quicker switch costs).

The MONITOR-based verdict of the fault soak cannot follow a lease through an eviction (the
server logs nothing for it, and the fleet record can be evicted too), so this soak checks from
the commands' own logs: no two commands of one name overlap; no lease was granted while the
server evicted (a command's fencing token is the server's clock at its grant); fencing tokens
increase; every lockrun's ledger row matches its exit code, and no orphan is left.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
import time
from pathlib import Path

import redis

from tests.soak.harness import Soak

EVICTING = ("allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu", "volatile-random",
            "volatile-ttl")
#: Two commands of one name may touch but not overlap by more than the clock's grain (s).
EPSILON = 0.002
#: Other keys written to fill the server: well over the memory left to it.
FILL_MB, HEADROOM_MB = 3, 1


class EvictionSoak(Soak):
    FAULT_WEIGHTS = {"evict": 1.0}
    # Quiet time between the evicting windows (each lasts the longest TTL and more), long enough
    # for runs to start and finish in it: the soak must see runs succeed as well as refused.
    FAULT_GAP = (1.5, 3.0)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.windows: list[tuple[float, float]] = []  # (policy set, policy back to noeviction), host clock
        self.evicted_keys = 0  # keys the server evicted while the soak made it evict
        self.refused = 0  # runs refused with exit 69 naming maxmemory-policy
        self.lost_holds = 0  # runs whose renewal or release found their lock gone (ledger: lost, lock_lost_at_release)

    def _fault_evict(self, rng) -> str:
        if not self._holders():
            return "no holder"
        policy = rng.choice(EVICTING)
        client = self.redis.client()
        try:
            held = list(client.keys("lockrun:{*}:lock"))
            evicted_before = client.info("stats")["evicted_keys"]
            used = client.info("memory")["used_memory"]
            client.config_set("maxmemory", used + HEADROOM_MB * 1024 * 1024)
            client.config_set("maxmemory-policy", policy)
            switched = time.time()
            # Other keys, with a TTL (volatile-* evict those too), each command evicting as it goes.
            for batch in range(FILL_MB * 4):
                try:
                    client.eval("for i = 1, 256 do redis.call('SET', 'filler:' .. ARGV[1] .. ':' .. i,"
                                " string.rep('x', 1024), 'EX', 600) end", 0, f"{switched:.3f}:{batch}")
                except redis.ResponseError as exc:
                    if "maxmemory" not in str(exc):
                        raise
                    break  # full, and the policy could free no more: as much pressure as there can be
            time.sleep(rng.uniform(0.3, 1.5))  # the holders renew (and find out) while it evicts
            gone = [key for key in held if not client.exists(key)]
            evicted = client.info("stats")["evicted_keys"] - evicted_before
            client.eval("for _, key in ipairs(redis.call('KEYS', 'filler:*')) do redis.call('DEL', key) end", 0)
            # Still saying it evicts, so every acquire is refused, until every holder renewed once.
            time.sleep(max(self.ttls) + 1.0)
            # The window ends as the policy is sent back: a grant the server makes once it has it
            # (before the next command, or this client's clock, say so) is no grant while evicting.
            restoring = time.time()
            client.config_set("maxmemory-policy", "noeviction")
            client.config_set("maxmemory", 0)
        except redis.RedisError as exc:
            # Never leave the server evicting: every later run would be refused, and no fault would
            # find a holder to evict.
            with contextlib.suppress(redis.RedisError):
                client.config_set("maxmemory-policy", "noeviction")
                client.config_set("maxmemory", 0)
            return f"failed: {exc}"
        finally:
            client.close()
        self.windows.append((switched, restoring))
        self.evicted_keys += evicted
        return f"{policy}: {evicted} keys evicted; {len(gone)} of {len(held)} held lock keys gone (evicted or released)"

    # -- verdict ----------------------------------------------------------------------

    def verdict(self) -> list[str]:
        commands = self.command_logs()
        self.refused = sum(1 for inv in self.invocations if inv.rc == 69 and "maxmemory-policy" in inv.stderr)
        self.lost_holds = sum(1 for row in self.history if row["status"] == "lost" or row.get("lock_lost_at_release"))
        self.evidence = (f"{len(self.windows)} evicting windows, {self.evicted_keys} keys evicted in them, "
                         f"{self.lost_holds} holders that found their lock gone, {self.refused} runs refused")
        return [*self._check_no_overlap(commands), *self._check_no_grant_while_evicting(commands),
                *self._check_tokens(commands), *self._check_lockruns(commands), *self._check_orphans()]

    def _check_no_overlap(self, commands) -> list[str]:
        problems = []
        for name in self.names:
            runs = sorted((cmd for cmd in commands if cmd.name == name), key=lambda cmd: cmd.started)
            for first, second in itertools.combinations(runs, 2):
                if second.started < first.last_seen - EPSILON:
                    problems.append(f"{name}: runs {first.run_id} and {second.run_id} overlapped for "
                                    f"{first.last_seen - second.started:.3f}s")
        return problems

    def _check_no_grant_while_evicting(self, commands) -> list[str]:
        problems = []
        for cmd in commands:
            granted = cmd.fencing_token / 1e6  # the server's TIME at the grant (max(counter + 1, TIME µs))
            for start, end in self.windows:
                if start + 0.01 < granted < end:
                    problems.append(f"run {cmd.run_id} ({cmd.name}) was granted at {granted:.3f}, while the server"
                                    f" evicted ({start:.3f} to {end:.3f})")
        return problems

    @staticmethod
    def _check_tokens(commands) -> list[str]:
        problems = []
        by_name: dict[str, list] = {}
        for cmd in commands:
            by_name.setdefault(cmd.name, []).append(cmd)
        for name, runs in by_name.items():
            ordered = sorted(runs, key=lambda cmd: cmd.started)
            for before, after in itertools.pairwise(ordered):
                # The attempts of one --retry run share its lease, and so its token: the same lockrun
                # (the commands' parent) ran both. Any other run's token is higher.
                same_lease = after.ppid == before.ppid and after.fencing_token == before.fencing_token
                if after.fencing_token <= before.fencing_token and not same_lease:
                    problems.append(f"{name}: fencing token {after.fencing_token} after {before.fencing_token}")
        return problems

    def summary(self) -> str:
        codes: dict = {}
        for inv in self.invocations:
            codes[inv.rc] = codes.get(inv.rc, 0) + 1
        return (f"eviction soak, seed {self.seed}, {self.duration:g}s: {len(self.invocations)} lockrun runs, "
                f"{len(self.command_logs())} commands ran, exit codes {dict(sorted(codes.items()))}; {self.evidence}")


def run_eviction_soak(seed: int, duration: float, workdir: Path | None = None,
                      **options) -> tuple[EvictionSoak, list[str]]:
    workdir = Path(workdir or tempfile.mkdtemp(prefix="lockrun-eviction-soak-"))
    soak = EvictionSoak(seed, duration, workdir, **options).run()
    return soak, soak.verdict()
