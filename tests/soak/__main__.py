"""Run the fault soak by hand: ``python -m tests.soak --seed 7 --duration 600``.

Exits 0 when every invariant held, 1 otherwise; prints the seed either way so a
failing schedule can be replayed. Keep the working directory with ``--keep`` to
read the command logs, the ledger and the MONITOR-based evidence afterwards.
``--failover`` runs the failover soak instead (tests/soak/failover.py): --replicas
0, 1, 2 and all against a master, two replicas and three Sentinels; it ends with a
table of the overlaps each --replicas group had, seed by seed. ``--eviction`` runs the eviction
soak (tests/soak/eviction.py): the server made an evicting cache mid-hold, then filled.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
from pathlib import Path

from tests.soak.eviction import run_eviction_soak
from tests.soak.failover import GROUPS, run_failover_soak
from tests.soak.harness import INVARIANTS, run_soak


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__.split("\n\n")[0],
                                     epilog="Invariants checked:\n" + INVARIANTS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None, help="the schedule's seed (default: a random one)")
    parser.add_argument("--runs", type=int, default=1, help="soaks to run, with seeds seed, seed+1, ...")
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of faults per soak (default 300)")
    parser.add_argument("--contenders", type=int, default=None,
                        help="lockrun loops running at once (default 6; with --failover 9, one name per --replicas)")
    parser.add_argument("--names", type=int, default=3, help="lock names they contend for (default 3)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    parser.add_argument("--failover", action="store_true",
                        help="the failover soak: Sentinel, two replicas, --replicas 0 / 1 / 2 / all")
    parser.add_argument("--eviction", action="store_true",
                        help="the eviction soak: an LRU (or other evicting) server filled mid-hold")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    failed = 0
    table = []
    for offset in range(args.runs):
        workdir = Path(tempfile.mkdtemp(prefix="lockrun-soak-"))
        if args.failover:
            soak, problems = run_failover_soak(seed + offset, args.duration, workdir,
                                               contenders=args.contenders or 9)
            table.append((seed + offset, len(soak.failovers), soak, bool(problems)))
        elif args.eviction:
            soak, problems = run_eviction_soak(seed + offset, args.duration, workdir,
                                               contenders=args.contenders or 6, names=args.names)
        else:
            soak, problems = run_soak(seed + offset, args.duration, workdir, contenders=args.contenders or 6,
                                      names=args.names)
        print(soak.summary(), flush=True)
        if problems:
            failed += 1
            replay = " --failover" if args.failover else " --eviction" if args.eviction else ""
            print(f"FAILED seed {seed + offset} (replay: python -m tests.soak{replay} --seed {seed + offset} "
                  f"--duration {args.duration:g}); evidence kept in {workdir}", flush=True)
            print("\n".join(problems[:50]))
            print("faults:\n" + soak.fault_log())
        elif not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"evidence kept in {workdir}")
        for note in getattr(soak, "crossing_notes", []):
            print(f"  grant over a valid lease: {note}")
    if table:
        print("\n| seed | failovers | " + " | ".join(f"overlaps, --replicas {g}" for g in GROUPS) + " | verdict |")
        print("|---|---|" + "---|" * len(GROUPS) + "---|")
        for run_seed, failovers, soak, broke in table:
            print(f"| {run_seed} | {failovers} | " + " | ".join(str(soak.overlaps[g]) for g in GROUPS)
                  + f" | {'FAILED' if broke else 'passed'} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
