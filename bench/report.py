"""Turn the benchmarks' JSON into bench/RESULTS.md: one table, each target met or not, with the evidence."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load(folder: Path, name: str) -> dict:
    return json.loads((folder / f"{name}.json").read_text())


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def timeline_row(t: dict) -> tuple[str, str, str, str]:
    return (
        f"`timeline --since 7d`, {t['names']} names x {t['runs_per_name']:,} runs ({t['rows']:,} rows)",
        f"{t['median_s']:.2f} s (`--version`: {t['median_ms']['lockrun --version'] / 1000:.2f} s; "
        f"{t['lanes_drawn']} lanes, {t['overlap_rows']} overlap rows; `--svg`: {t['svg_s']:.1f} s, "
        f"{t['svg_bytes'] / 1024:.0f} KiB)", "<= 1 s", verdict(t["median_s"] <= 1.0))


def main(folder: str, command: str) -> None:
    d = Path(folder)
    s, r, h, f, led, st, fl = (
        load(d, n) for n in ("startup", "roundtrips", "handover", "footprint", "ledger", "status", "fleet")
    )
    fleet_headline = fl["cases"]["history --fleet --limit 50"]
    fleet_others = "; ".join(f"`{k}` {v['median_s']:.2f} s" for k, v in fl["cases"].items()
                             if k != "history --fleet --limit 50")
    m = s["machine"]
    trips = r["cases"]
    trips_ok = all(c["total"] == c["expected"] for c in trips.values())
    hist = max(v for k, v in led["ratio_to_version"].items() if k.startswith("history"))
    stat_local = led["ratio_to_version"]["status --json (local, 3 held)"]
    burst = led["burst"]
    rows = [
        ("start-up: `lockrun -n b -- true` (Redis) / `python -c 'import click, redis, sqlite3'`",
         f"{s['ratio']:.2f}x (local backend: {s['ratio_to_floor']['lockrun (local)']:.2f}x; flock: "
         f"{s['median_ms']['flock -n f true']:.1f} ms; redis-cli wrapper: "
         f"{s['median_ms']['sh: redis-cli SET NX; true; DEL']:.1f} ms)", "<= 1.10x", verdict(s["ratio"] <= 1.10)),
        ("Redis round trips per uncontended run / per renewal",
         "; ".join(f"{k}: {v['total']}" for k, v in trips.items()), "2 + 1 per renewal", verdict(trips_ok)),
        ("hand-over latency, release to next command start",
         f"p50 {h['p50_ms']:.2f} ms, p99 {h['p99_ms']:.2f} ms ({h['samples']} samples, {h['waiters']} waiters)",
         "p50 <= 5 ms, p99 <= 25 ms", verdict(h["p50_ms"] <= 5 and h["p99_ms"] <= 25)),
        (f"supervisor peak RSS, `--ttl 3 -- sleep {f['seconds']:g}`",
         f"{f['peak_rss_mib']:.1f} MiB (+ watchdog {f['watchdog_rss_mib']:.1f} MiB; the bare stack: "
         f"{f['floor_rss_mib']:.1f} MiB)", "<= 35 MiB", verdict(f["peak_rss_mib"] <= 35)),
        (f"supervisor CPU, `--ttl 3 -- sleep {f['seconds']:g}`",
         f"{f['cpu_s']:.3f} s (importing click, redis, sqlite3 alone: {f['floor_cpu_s']:.3f} s)", "<= 0.2 s",
         verdict(f["cpu_s"] <= 0.2)),
        (f"`history --limit 50 --json`, {led['rows']:,} rows / `lockrun --version`", f"{hist:.2f}x (worst filter)",
         "<= 1.2x", verdict(hist <= 1.2)),
        (f"`status --json`, {led['rows']:,} rows / `lockrun --version`",
         f"{stat_local:.2f}x local backend; "
         f"{led['ratio_to_version']['status --json (redis, 3 held)']:.2f}x with Redis", "<= 1.2x",
         verdict(stat_local <= 1.2)),
        ("50 concurrent runs recording", f"{burst['recorded']}/50 recorded, {burst['locked_messages']} "
         "'database is locked'", "0 lost, 0 locked", verdict(burst["recorded"] == 50 and not burst["locked_messages"])),
        ("`status --json` with 10,000 held locks, each with its last run from the fleet record",
         f"{st['median_s']:.3f} s ({st['listed']} listed, {st.get('with_last_run', 0)} with a last run)", "<= 1.5 s",
         verdict(st["median_s"] <= 1.5 and st["listed"] == st["locks"] == st.get("with_last_run"))),
        (f"`history --fleet --limit 50`, {fl['names']:,} names x {fl['runs']:,} runs in Redis",
         f"{fleet_headline['median_s']:.3f} s ({fleet_headline['rows']} rows; for the record, selective filters "
         f"read further back: {fleet_others})", "<= 1.5 s",
         verdict(fleet_headline["median_s"] <= 1.5 and fleet_headline["rows"] == 50)),
    ]
    if "ratio_to_baseline" in s and s["ratio_to_baseline"]:
        against = s["ratio_to_baseline"]
        rows.append(("start-up against the version before (`startup.py --baseline`, same interpreter, interleaved)",
                     "; ".join(f"{backend} {ratio:.3f}x" for backend, ratio in against.items()),
                     "no measurable growth", "-"))
    idle = d / "idle_cpu.json"
    if idle.exists():
        i = json.loads(idle.read_text())
        base = i["idle_cpu_ms_per_min"].get("baseline")
        rows.append((f"idle CPU, `--ttl 3 -- sleep {i['seconds']:g}` (lockrun's threads, from 2 s in to 1 s before "
                     f"the end, per minute; median of {i['rounds']})",
                     f"{i['idle_cpu_ms_per_min']['lockrun']:.1f} ms/min" +
                     (f" (the version before, run beside it: {base:.1f} ms/min)" if base is not None else ""),
                     "no measurable growth", "-"))
    local_wait = d / "local_wait.json"
    if local_wait.exists():
        w = json.loads(local_wait.read_text())
        cpu, p50, p99 = w["waiting_cpu_percent"], w["handover_p50_ms"], w["handover_p99_ms"]
        before = (f" (the version before, run beside it: {cpu['baseline']:.2f} %, hand-over p50"
                  f" {p50['baseline']:.2f} ms)" if "baseline" in cpu else "")
        rows.append((f"a local `--wait`: CPU of a waiter over {w['seconds']:g} s (median of {w['rounds']}), and"
                     " hand-over to 2 waiters", f"{cpu['lockrun']:.2f} % of a core; hand-over p50 {p50['lockrun']:.2f}"
                     f" ms, p99 {p99['lockrun']:.2f} ms{before}", "well under 1 %; hand-over no slower",
                     verdict(cpu["lockrun"] < 1.0)))
    timeline = d / "timeline.json"
    if timeline.exists():
        rows.append(timeline_row(json.loads(timeline.read_text())))
    if (d / "replicas.json").exists():
        rep = load(d, "replicas")
        acq, ren, trips = rep["calls"]["acquire"], rep["calls"]["renew"], rep["round_trips"]
        rows.append((
            "`--replicas 1` against a local replica: acquire / renewal round trip, median (p99)",
            f"acquire {acq['1']['median_us']:.0f} µs ({acq['1']['p99_us']:.0f}) vs {acq['0']['median_us']:.0f} µs "
            f"({acq['0']['p99_us']:.0f}) without; renewal {ren['1']['median_us']:.0f} µs ({ren['1']['p99_us']:.0f}) vs "
            f"{ren['0']['median_us']:.0f} µs ({ren['0']['p99_us']:.0f}); a whole run "
            f"{rep['wall_median_ms']['1'] - rep['wall_median_ms']['0']:+.1f} ms",
            "measured (no target)", "-"))
        two = trips["requests"] == 2 and trips["commands"] == ["EVAL", "WAIT", "EVAL"]
        rows.append(("Redis round trips of an uncontended `--replicas 1` run",
                     f"{trips['requests']} ({', '.join(trips['commands'])}: WAIT pipelined behind the acquire)",
                     "2", verdict(two)))
    if (d / "eviction.json").exists():
        rows.append(eviction_row(load(d, "eviction")))
    if "baseline" in h:
        base = h["baseline"]
        rows.append(("hand-over latency of the version before, rounds alternating with this one's",
                     f"p50 {base['p50_ms']:.2f} ms, p99 {base['p99_ms']:.2f} ms (this one: p50 {h['p50_ms']:.2f}, "
                     f"p99 {h['p99_ms']:.2f})", "-", "-"))
    if (d / "waiters.json").exists():
        rows.extend(waiters_rows(load(d, "waiters")))
    if (d / "redis_import.json").exists():
        rows.append(redis_import_row(load(d, "redis_import")))
    if (d / "api_import.json").exists():
        rows.append(api_import_row(load(d, "api_import")))
    if (d / "fleet_memory.json").exists():
        rows += fleet_memory_rows(load(d, "fleet_memory"))
    if (d / "keyspace.json").exists():
        rows.append(keyspace_row(load(d, "keyspace")))
    print("# lockrun benchmark results\n")
    print(f"Reproduce with `{command.strip()}` from the repository root (`bench/run --quick` for a smoke run). "
          f"Machine: {m['platform']}, {m['cpus']} CPUs, Python {m['python']}, redis-py {m['redis_py']}, "
          f"redis-server {m.get('redis_server', '?')}. Ratios are medians of per-round ratios of interleaved "
          "runs, because this machine's speed drifts by ±20 % from one second to the next.\n")
    print("| what | measured | target | result |")
    print("|---|---|---|---|")
    for what, measured, target, result in rows:
        print(f"| {what} | {measured} | {target} | {result} |")
    breakdown = d / "breakdown.json"
    if breakdown.exists():
        b = json.loads(breakdown.read_text())
        print("\n### Where start-up goes (`bench/breakdown.py`, in-process medians, ms)\n")
        print("| step | ms |")
        print("|---|---|")
        for step, ms in b["median_ms"].items():
            print(f"| {step} | {ms:.2f} |")
        print(f"| **total beyond the floor** | **{b['beyond_floor_ms']:.2f}** |")
        print(f"| floor: import click, redis, sqlite3 | {b['floor_ms']:.2f} |")
        print(f"| the 1.10x target's budget (10 % of the floor) | {b['floor_ms'] * 0.10:.2f} |")
        print(f"\nThe steps every run must take (docs/internals.md) (ledger row before and after, acquire and "
              f"release, the command's process with its death signal, the watchdog) take "
              f"{b['required_steps_ms']:.2f} ms by themselves. `command: fork, PDEATHSIG, exec` includes the "
              "watchdog and prctl rows above it.")
    # The hand-written notes, once, last (they carry their own "## Notes" heading).
    print()
    print(Path(__file__).with_name("NOTES.md").read_text(), end="")


def eviction_row(ev: dict) -> tuple[str, str, str, str]:
    """The acquire script's own INFO memory (README "A Redis that evicts keys"), bench/eviction_check.py."""
    shipped, unchecked = ev["idle"]["shipped"], ev["idle"]["unchecked"]
    crowded = ev["500 clients"]["shipped"]
    grown = shipped["eval_usec_per_call"] / unchecked["eval_usec_per_call"] - 1
    return (
        "the acquire script's eviction check (`INFO memory` inside it): server time per acquire, round trip",
        f"INFO memory {shipped['info_usec_per_call']:.1f} µs per call ({crowded['info_usec_per_call']:.1f} with 500"
        f" idle clients); the acquire's EVAL {shipped['eval_usec_per_call']:.0f} µs vs"
        f" {unchecked['eval_usec_per_call']:.0f} µs without the check ({grown:+.0%}); round trip median"
        f" {shipped['rtt_median_us']:.0f} µs vs {unchecked['rtt_median_us']:.0f} µs",
        "measured (no target)", "-")


def waiters_rows(w: dict) -> list[tuple[str, str, str, str]]:
    """bench/waiters.py: a queue of waiters on one name, this version beside the one before."""
    mine, base = w["results"]["this version"], w["results"].get("baseline")
    n = mine["waiters"]

    def commands(r: dict) -> str:
        return (f"{r['per_waiter_without_release']:.2f} ({', '.join(f'{k} {v}' for k, v in r['total'].items() if v)}"
                f" for {n} hand-overs, their {n} releases taken off; idle: {r['idle_per_waiter_per_s']:.2f} per waiter"
                " per second)")

    def memory(r: dict) -> str:
        m = r["memory_median"]
        own = f", own {m['own_kib'] / 1024:.1f}" if m["own_kib"] is not None else ""
        return (f"USS {m['uss_kib'] / 1024:.1f} MiB (PSS {m['pss_kib'] / 1024:.1f}, RSS {m['rss_kib'] / 1024:.1f}"
                f"{own}; {m['processes']:.0f} processes)")

    before = lambda text: f"; the version before: {text}" if base else ""  # noqa: E731
    ok_mem = mine["memory_median"]["uss_kib"] / 1024 <= 6
    own = mine["memory_median"]["own_kib"]
    mem_verdict = verdict(ok_mem)
    if own is not None:  # USS leaves out what the job's processes share with each other (NOTES.md)
        mem_verdict += f" by USS; by own pages ({own / 1024:.1f} MiB): {verdict(own / 1024 <= 6)}"
    return [
        (f"Redis commands per waiter per hand-over, {n} `--wait` runs queued on one name (`INFO commandstats`)",
         commands(mine) + before(commands(base) if base else ""), "<= 3",
         verdict(mine["per_waiter_without_release"] <= 3)),
        (f"connections of {n} waiters (`INFO clients`)",
         f"{mine['connections_max']}" + before(f"{base['connections_max']}" if base else ""), f"{n}",
         verdict(mine["connections_max"] <= n)),
        ("memory of a waiting job, all its processes together (`/proc/PID/smaps_rollup`; own: the pages no other "
         "process maps, `/proc/kpagecount`)", memory(mine) + before(memory(base) if base else ""), "USS <= 6 MB",
         mem_verdict),
    ]


def redis_import_row(r: dict) -> tuple[str, str, str, str]:
    """bench/redis_import.py: what the Redis run path's imports cost, per redis-py version."""
    parts = [f"redis-py {version}: {m['total']:.0f} ms, of which redis {m['redis']:.0f}, redis.asyncio "
             f"{m['redis.asyncio']:.0f}, importlib.metadata {m['importlib.metadata']:.0f}"
             for version, m in r["medians_ms"].items()]
    wall = r.get("wall_ms", {})
    text = "; ".join(parts)
    if wall:
        floor = wall["python -c pass"]
        unused = "import asyncio, importlib.metadata, logging, concurrent.futures"
        paths = ", ".join(f"{name.rsplit('(', 1)[1].rstrip(')')} {ms - floor:+.0f} ms" for name, ms in wall.items()
                          if name.startswith("import lockrun.backends.redis.backend"))
        text += (f". Wall clock above `python -c pass`: `import redis` {wall['import redis'] - floor:+.0f} ms, the"
                 f" standard-library modules it pulls that lockrun never uses ({unused.removeprefix('import ')})"
                 f" {wall[unused] - floor:+.0f} ms; the Redis run path's imports by redis-py version: {paths}")
    return ("what the Redis run path imports (`import lockrun.backends.redis.backend`; -X importtime, cumulative,"
            " medians)", text, "measured (no target)", "-")


def api_import_row(a: dict) -> tuple[str, str, str, str]:
    """bench/api_import.py: what the Python API costs a program that imports lockrun, and one block."""
    ms = a["median_ms"]
    floor = ms["python -c pass"]
    text = (f"`import lockrun` {ms['import lockrun'] - floor:+.1f} ms, `lockrun.lock` "
            f"{ms['import lockrun; lockrun.lock'] - floor:+.1f} ms ({a['modules_loaded_by_lock']} modules),"
            " `lockrun.lock_async` "
            f"{ms['import lockrun; lockrun.lock_async'] - floor:+.1f} ms; a process running one block: local "
            f"{ms['one block (local)'] - floor:+.1f} ms, Redis {ms['one block (redis)'] - floor:+.1f} ms (`lockrun -n b"
            f" -- true`: {ms['lockrun -n b -- true (local)'] - floor:+.1f} and"
            f" {ms['lockrun -n b -- true (redis)'] - floor:+.1f} ms)")
    return ("the Python API (`bench/api_import.py`; wall clock above `python -c pass`, medians)", text,
            "`import lockrun`: nothing", "met" if ms["import lockrun"] - floor < 1.0 else "**missed**")


def fleet_memory_rows(fm: dict) -> list[tuple[str, str, str, str]]:
    """bench/fleet_memory.py: bytes per run and per name, this version beside the one before."""
    mine = fm["versions"]["this version"]
    before = fm["versions"].get("before (baseline)")

    def was(key: str, scale: float, unit: str) -> str:
        if not before:
            return ""
        text = f"{before[key] / scale:.0f} {unit}" if scale == 1 else f"{before[key] / scale:.1f} {unit}"
        if key == "per_name":
            text += f" at {before['keep_runs']} runs, {before['stream_entries']} entries; 10,000 names " \
                    f"{before['per_name'] * 10_000 / 1e6:,.0f} MB"
        return f" (before: {text})"

    markers = (f"; `ended:RUN_ID` markers left by {before['keep_runs'] * 3 // 2} runs: before "
               f"{before['ended_markers']}, now {mine['ended_markers']}") if before else ""
    return [
        ("fleet record: `MEMORY USAGE` per recorded run (realistic host name and command)",
         f"{mine['per_run']:.0f} bytes{was('per_run', 1, 'bytes')}", "<= 160 bytes",
         verdict(mine["per_run"] <= 160)),
        (f"fleet record: one name at the default retention ({mine['keep_runs']} runs; 10,000 names)",
         f"{mine['per_name'] / 1024:.1f} KiB, {mine['stream_entries']} entries; 10,000 names "
         f"{mine['per_name'] * 10_000 / 1e6:.0f} MB{was('per_name', 1024, 'KiB')}{markers}",
         "<= 64 KiB (640 MB)", verdict(mine["per_name"] <= 64 * 1024)),
    ]


def keyspace_row(ks: dict) -> tuple[str, str, str, str]:
    """bench/keyspace_scale.py: the read commands with 1,000,000 unrelated keys / with none."""
    mine = ks["versions"]["this version"]
    before = ks["versions"].get("before (baseline)")

    def ratios(r: dict) -> str:
        return ", ".join(f"`{c}` {r['crowded_s'][c] / r['bare_s'][c]:.2f}x" for c in r["bare_s"])

    worst = max(mine["crowded_s"][c] / mine["bare_s"][c] for c in mine["bare_s"])
    text = f"{ratios(mine)}; {mine['scan_calls_crowded']} SCAN calls"
    if before:
        text += f" (before: {ratios(before)}; {before['scan_calls_crowded']} SCAN calls)"
    return (f"read commands with {ks['keys']:,} unrelated keys / with none ({ks['names']} names)", text,
            "<= 1.2x", verdict(worst <= 1.2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="Write bench/RESULTS.md (on standard output) from the JSON files bench/run leaves in FOLDER: "
                    "one table of targets met or missed, the start-up breakdown, then bench/NOTES.md once.")
    parser.add_argument("folder", help="the folder of startup.json, roundtrips.json, ... (bench/run makes one)")
    parser.add_argument("command", nargs="?", default="bench/run",
                        help="the command that made them, quoted in the text [default: bench/run]")
    args = parser.parse_args()
    main(args.folder, args.command)
