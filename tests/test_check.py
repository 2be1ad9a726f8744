"""`lockrun check` (docs/operating.md "Monitoring: lockrun check"): a Nagios plugin through real
processes: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN, one first line with perfdata."""

from __future__ import annotations

import json
import os
import re
import subprocess

from tests.conftest import lockrun_argv, run_lockrun, spawn_lockrun, wait_until

# Perfdata as the Nagios plugin guidelines write it: 'label'=value[UOM];[warn];[crit];[min];[max]
# (value "U" when it cannot be determined); lockrun's: seconds since the last success, min 0.
ITEM = r"('[^=']+'|[^=' ]+)=(\d+s|U);;\d*;0"
PERFDATA = re.compile(rf"^LOCKRUN (OK|WARNING|CRITICAL|UNKNOWN) - [^|\n]+( \| {ITEM}( {ITEM})*)?$")


def check(env, *args):
    result = run_lockrun(env, "check", *args)
    assert "Traceback" not in result.stderr and result.stderr == "", result.stderr
    first = result.stdout.splitlines()[0]
    assert PERFDATA.match(first), first
    return result.returncode, first, result.stdout.splitlines()[1:]


def test_ok_then_critical_for_a_failed_run_and_an_overdue_name(any_env):
    assert run_lockrun(any_env, "-n", "hourly", "--every", "1h", "--", "true").returncode == 0
    assert check(any_env)[:2] == (0, "LOCKRUN OK - 1 name checked | hourly_age=0s;;3900;0")

    assert run_lockrun(any_env, "-n", "flaky", "--", "false").returncode == 1
    code, first, details = check(any_env)
    assert code == 2 and first.startswith("LOCKRUN CRITICAL - flaky last run failed on ")
    assert "(no success recorded)" in first and details == [details[0]] and details[0].startswith("flaky: CRITICAL")

    assert run_lockrun(any_env, "-n", "late", "--every", "1", "--grace", "0", "--", "true").returncode == 0
    wait_until(lambda: "late overdue" in check(any_env, "late")[1], what="late to be overdue")
    code, first, _ = check(any_env, "late")
    assert code == 2 and re.match(r"LOCKRUN CRITICAL - late overdue \d+s \(last success [\d.]+s ago on \S+\)"
                                  r" \| late_age=\d+s;;1;0$", first), first
    assert check(any_env, "hourly")[0] == 0

    report = json.loads(run_lockrun(any_env, "check", "--json").stdout)
    assert report["status"] == "CRITICAL" and report["exit_code"] == 2
    by_name = {entry["name"]: entry for entry in report["names"]}
    assert by_name["hourly"]["status"] == "OK" and by_name["late"]["status"] == "CRITICAL"
    assert by_name["late"]["overdue_s"] > 0 and by_name["flaky"]["last_run"]["status"] == "failed"


def test_max_age_judges_names_with_no_declaration(any_env):
    assert run_lockrun(any_env, "-n", "undeclared", "--", "true").returncode == 0
    assert check(any_env, "undeclared")[0] == 0
    assert check(any_env, "undeclared", "--max-age", "1h")[0] == 0
    wait_until(lambda: check(any_env, "undeclared", "--max-age", "1")[0] == 2, what="the success to age")
    first = check(any_env, "undeclared", "--max-age", "1")[1]
    assert "undeclared last success" in first and "more than --max-age 1.0s" in first and ";;1" in first


def test_a_paused_name_is_ok_paused_until(any_env):
    assert run_lockrun(any_env, "-n", "nightly", "--every", "1", "--grace", "0", "--", "false").returncode == 1
    assert check(any_env, "nightly")[0] == 2
    assert run_lockrun(any_env, "pause", "nightly", "--for", "1h").returncode == 0
    code, first, details = check(any_env, "nightly")
    assert code == 0 and first.startswith("LOCKRUN OK - nightly paused until 20") and details == []


def test_warning_for_a_malformed_lock_or_pause(env, redis_server):
    assert run_lockrun(env, "-n", "job", "--", "true").returncode == 0
    redis_server.client().rpush("lockrun:{job}:lock", "not a lock")
    code, first, details = check(env, "job")
    assert code == 1 and first.startswith("LOCKRUN WARNING - job lock is malformed"), first
    redis_server.client().delete("lockrun:{job}:lock")
    redis_server.client().set("lockrun:{job}:paused", "yes")
    code, first, _ = check(env, "job")
    assert code == 1 and "job has a malformed pause, not honoured" in first


def test_warning_for_a_malformed_local_pause(local_env, tmp_path):
    assert run_lockrun(local_env, "-n", "job", "--", "true").returncode == 0
    (tmp_path / "state" / "locks" / "job~paused").write_text("{}")
    code, first, _ = check(local_env)
    assert code == 1 and "job has a malformed pause" in first


def test_unknown_when_the_backend_is_down_or_the_name_unknown(env, redis_server):
    assert run_lockrun(env, "-n", "job", "--", "true").returncode == 0
    code, first, _ = check(env, "job", "nobody")
    assert code == 3 and first.startswith("LOCKRUN UNKNOWN - nobody unknown to lockrun")
    redis_server.kill()
    result = run_lockrun(env, "check")
    assert result.returncode == 3 and result.stdout.startswith("LOCKRUN UNKNOWN - backend unreachable: ")
    assert result.stdout.count("\n") == 1 and result.stderr == ""
    assert json.loads(run_lockrun(env, "check", "--json").stdout)["status"] == "UNKNOWN"


def test_unknown_for_an_unreadable_ledger(local_env, tmp_path):
    assert run_lockrun(local_env, "-n", "job", "--", "true").returncode == 0
    ledger = tmp_path / "state" / "ledger.db"
    ledger.chmod(0o666)  # others may write it: refused as the config file would be
    result = run_lockrun(local_env, "check")
    assert result.returncode == 3 and result.stdout.startswith("LOCKRUN UNKNOWN - cannot read the run ledger")


def test_warning_for_a_redis_that_may_evict_keys(tmp_path):
    from tests.conftest import RedisServer, isolated_env

    server = RedisServer(args=("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")).start()
    try:
        env = {**isolated_env(tmp_path), "LOCKRUN_REDIS_URL": server.url}
        assert run_lockrun(env, "-n", "job", "--allow-eviction", "--", "true").returncode == 0
        code, first, details = check(env)
        assert code == 1 and first.startswith("LOCKRUN WARNING - ") and "allkeys-lru" in first, first
        assert any("allkeys-lru" in line for line in details)
    finally:
        server.cleanup()


def test_a_run_past_its_warn_after_is_a_warning(any_env):
    """--warn-after (docs/operating.md "Output") found the command slow: check says WARNING while it runs."""
    proc = spawn_lockrun(any_env, "-n", "slowpoke", "--warn-after", "1", "--", "sleep", "60")
    try:
        def warned():
            result = run_lockrun(any_env, "check", "slowpoke")
            return result if result.returncode == 1 else None
        result = wait_until(warned, timeout=30, interval=0.5, what="check to say WARNING for a slow run")
        assert result.stdout.startswith("LOCKRUN WARNING - slowpoke is slow"), result.stdout
    finally:
        proc.terminate()
        proc.wait(30)


def test_foreign_names_never_break_the_plugin_output(env, redis_server):
    # Names registered by something other than lockrun may hold what lockrun's own never do: a
    # `|` (Nagios reads perfdata after the first one on any line), `=` and `'` (not allowed in a
    # perfdata label, quoted or not; a space needs the quotes), a newline (one more line of output).
    client = redis_server.client()
    odd = ["it's a|b=c", "nl\nname"]
    seconds, _ = client.time()
    for name in odd:
        client.zadd("lockrun:names", {name: seconds * 1000})  # written now: not pruned by the next run
        client.set(f"lockrun:{{{name}}}:paused", "not a hash")  # a malformed pause: WARNING
    assert run_lockrun(env, "-n", "plain", "--", "true").returncode == 0
    client.hset("lockrun:{it's a|b=c}:last", mapping=client.hgetall("lockrun:{plain}:last"))
    result = run_lockrun(env, "check")
    assert result.returncode == 1, result
    lines = result.stdout.splitlines()
    assert len(lines) == 1 + len(odd), lines  # the first line, and one per name that is not OK
    assert lines[0].count("|") == 1 and all("|" not in line for line in lines[1:]), lines
    perf = lines[0].split("|", 1)[1]
    labels = [label for label, _ in re.findall(ITEM, perf)]
    assert len(labels) == 3 and re.sub(ITEM, "", perf).strip() == "", perf
    assert labels == ["'its a_b_c_age'", "'nl\\nname_age'", "plain_age"], labels  # no success known: U


def test_a_paused_overdue_name_gives_no_critical_threshold_it_is_past(any_env):
    # A paused name is OK whatever its age: a `;;C` it is past would make a perfdata reader (a
    # graph's threshold line, an Icinga metric check) call CRITICAL what the plugin says is OK.
    assert run_lockrun(any_env, "-n", "nightly", "--every", "1", "--grace", "0", "--", "true").returncode == 0
    assert run_lockrun(any_env, "pause", "nightly", "--for", "1h").returncode == 0
    def report():
        return json.loads(run_lockrun(any_env, "check", "--json", "nightly").stdout)

    wait_until(lambda: report()["names"][0]["age_s"] >= 2.5, what="the name's age past its cadence")
    code, first, _ = check(any_env, "nightly")
    assert code == 0 and re.search(r"nightly_age=\d+s;;;0( |$)", first), first
    assert report()["names"][0]["critical_age_s"] is None


def test_the_plugin_state_survives_an_output_that_cannot_be_written(any_env):
    # A plugin's answer is its exit code: a reader that went away early (`lockrun check | head -1`
    # under pipefail) must still get CRITICAL, not the 0 of a quiet stop; output that cannot be
    # written at all (a full disk) is UNKNOWN, never WARNING's 1.
    assert run_lockrun(any_env, "-n", "job", "--", "false").returncode == 1
    assert run_lockrun(any_env, "check").returncode == 2
    read_end, write_end = os.pipe()
    os.close(read_end)  # gone before lockrun writes a byte: its first write fails with EPIPE
    try:
        closed = subprocess.run(lockrun_argv("check"), env=any_env, stdout=write_end, stderr=subprocess.PIPE,
                                text=True, timeout=60)
    finally:
        os.close(write_end)
    assert closed.returncode == 2 and closed.stderr == "", closed
    with open("/dev/full", "w") as full:
        result = subprocess.run(lockrun_argv("check"), env=any_env, stdout=full, stderr=subprocess.PIPE,
                                text=True, timeout=60)
    assert result.returncode == 3, result
    assert result.stderr.startswith("lockrun: cannot write to standard output") and result.stderr.count("\n") == 1
