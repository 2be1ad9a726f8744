"""Hostile input, hostile neighbours: every reproduced case of the hardening issue, through a real lockrun.

Each case ends in a documented exit code with one clear line, no traceback, no lost ledger row
and no orphan process. The README's "Security notes" and exit-code table say what is checked.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lockrun.system.host import hostname
from tests.conftest import (
    RedisServer,
    assert_one_line,
    history,
    isolated_env,
    pid_alive,
    run_lockrun,
    spawn_lockrun,
    wait_until,
)

OTHER_UID = 12345  # nobody on the machine: "a file owned by another user"



def status_json(env, *names) -> dict:
    result = run_lockrun(env, "status", "--json", *names, timeout=30)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def injected(code: str, env: dict, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """lockrun in a real process whose Python first runs ``code``: a fault the kernel would
    rarely give on demand (no thread, no POSIX timer), injected the way a soak harness does."""
    argv = [sys.executable, "-c", f"{code}\nfrom lockrun.cli.main import main\nmain()", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, **kwargs)


# --- every number has a range, checked at parse time -----------------------------------------------


@pytest.mark.parametrize("args,needle", [
    (["--ttl", "30000000000"], "at least 1s and at most 365d"),
    (["--ttl", "9999999999999999"], "--ttl"),
    (["--ttl", "31536000.5"], "--ttl"),
    (["--wait", "31536001"], "--wait"),
    (["--timeout", "1" + "0" * 30], "--timeout"),
    (["--kill-after", "99999999999"], "--kill-after"),
    (["--min-hold", "99999999d"], "at most 365d"),
    (["--min-hold", "366d"], "--min-hold"),
    (["--remember", "36501d"], "at most 36500d"),
    (["--remember", "9" * 400 + "d"], "--remember"),
    (["--slots", "10001"], "--slots"),
])
def test_out_of_range_run_values_are_usage_errors(any_env, tmp_path, args, needle):
    ran = tmp_path / "ran"
    assert_one_line(run_lockrun(any_env, "-n", "r", *args, "--", "touch", str(ran)), 2, needle)
    assert not ran.exists()


@pytest.mark.parametrize("args,needle", [
    (["history", "--since", "99999999d"], "at most 36500d"),
    (["prune", "--older-than", "99999999d"], "at most 36500d"),
    (["history", "--limit", str(10 ** 23)], "--limit"),
])
def test_out_of_range_read_values_are_usage_errors(any_env, args, needle):
    run_lockrun(any_env, "-n", "r", "--", "true")  # a ledger to read
    assert_one_line(run_lockrun(any_env, *args), 2, needle)


def test_the_largest_values_work_end_to_end(any_env):
    year = "31536000"
    result = run_lockrun(any_env, "-n", "long", "--ttl", year, "--wait", year, "--timeout", year, "--kill-after", year,
                         "--remember", "36500d", "--once", "k", "--min-hold", "365d", "--", "true")
    assert (result.returncode, result.stderr) == (0, "")
    (lock,) = status_json(any_env, "long")["locks"]
    assert lock["state"] == "cooling" and lock["ttl_remaining_s"] > 364 * 86400
    assert run_lockrun(any_env, "unlock", "long", "--yes").returncode == 0
    for args in (["history", "--since", "36500d", "--limit", "1000000000"], ["prune", "--older-than", "36500d"]):
        assert run_lockrun(any_env, *args).returncode == 0


@pytest.mark.parametrize("line,needle", [
    ("ttl = 1e300", 'ttl must be seconds (90) or a duration string ("2m"), at least 1s and at most 365d'),
    ("ttl = '1e300'", "ttl must be"),
    ("min_hold = 1e300", "min_hold must be"),
    ("ttl = 31536001", "ttl must be"),
    ("ledger_keep_days = 99999999999", "ledger_keep_days must be a whole number of days from 1 to 36500"),
    ("ledger_keep_days = 0", "ledger_keep_days"),
    ("socket_timeout = 1e300", "socket_timeout"),
    ("connect_timeout = 0", "connect_timeout"),
    ("min_hold = '99999999d'", "at most 365d"),
])
def test_out_of_range_config_values_are_config_errors(any_env, tmp_path, line, needle):
    config = tmp_path / "range.toml"
    config.write_text(line + "\n")
    any_env["LOCKRUN_CONFIG"] = str(config)
    ran = tmp_path / "ran"
    assert_one_line(run_lockrun(any_env, "-n", "c", "--", "touch", str(ran)), 78, str(config), "line 1", needle)
    assert not ran.exists()  # refused before anything ran: no command that succeeded and then exited 125


@pytest.mark.parametrize("url,needle", [
    ("redis://h:6379/0?ssl_cert_reqs=none", "rediss:// (TLS) URLs only"),
    ("redis://h:6379/0?frobnicate=1", "unknown query parameter 'frobnicate'"),
    ("unix:///tmp/redis.sock?socket_keepalive=true", "unknown query parameter 'socket_keepalive'"),
    # values redis-py would read as something else, or fail on at the first connection (exit 125)
    ("redis://h:6379/99999999999999999999", "the database number must be from 0 to 2147483647"),
    ("redis://h:6379/0?socket_timeout=nan", "socket_timeout='nan': a number of seconds"),
    ("redis://h:6379/0?retry_on_timeout=maybe", "retry_on_timeout='maybe': true or false"),
    ("rediss://h:6379/0?ssl_cert_reqs=bogus", "ssl_cert_reqs='bogus': none, optional or required"),
    ("rediss://h:6379/0?ssl_keyfile=/etc/passwd&ssl_password=s3cret", "ssl_keyfile needs ssl_certfile"),
    ("rediss://h:6379/0?ssl_ca_certs=/no/such/ca.pem", "a file that exists on this host"),
    ("redis://a..b:6379/0", "is not one"),
    ("redis://h:6379/0?client_name=a%20b", "without spaces"),
    ("redis://h:6379/0?db=1&db=2", "db is given twice"),
    # a password with a raw # ? or /: urlsplit would end the host in it, and show the rest
    ("redis://u:s3cr#et@h:6379/0", "percent-encode them in the password"),
    ("redis://:12345#s3cret@h:6379/0", "percent-encode them in the password"),
])
def test_redis_url_query_a_connection_cannot_take_is_a_usage_error(tmp_path, url, needle):
    env = isolated_env(tmp_path)
    for args in (("--redis-url", url, "-n", "q", "--", "true"), ("status", "--redis-url", url)):
        result = run_lockrun(env, *args)
        assert_one_line(result, 2, needle)
        assert "s3cret" not in result.stderr


def test_a_path_of_thousands_of_characters_is_cut_in_the_error_line(tmp_path):
    env = {**isolated_env(tmp_path), "LOCKRUN_STATE_DIR": str(tmp_path / ("a" * 5000))}
    result = run_lockrun(env, "-n", "x", "--", "true")
    assert_one_line(result, 69, "cannot use the state directory", "characters): ")
    assert len(result.stderr) < 600, result.stderr


def test_a_newline_in_a_path_cannot_make_a_second_line(tmp_path):
    env = {**isolated_env(tmp_path), "LOCKRUN_STATE_DIR": "/proc/x\nlockrun: all is well"}
    result = run_lockrun(env, "-n", "x", "--", "true")
    assert_one_line(result, 69, "/proc/x\\nlockrun: all is well")


def test_a_200_character_name_of_colons_works_on_the_local_backend(local_env, tmp_path):
    name = "a" + ":" * 199
    key = "k" + ":" * 199
    flag = tmp_path / "started"
    holder = spawn_lockrun(local_env, "-n", name, "--", "sh", "-c", f"touch {flag}; exec sleep 60",
                           stderr=subprocess.PIPE)
    try:
        wait_until(flag.exists, what="the long-named holder")
        assert run_lockrun(local_env, "-n", name, "--", "true").returncode == 75
        assert [(lock["name"], lock["state"]) for lock in status_json(local_env)["locks"]] == [(name, "held")]
        assert status_json(local_env, name)["locks"][0]["pid"] == holder.pid
        assert run_lockrun(local_env, "unlock", name, "--force", "--yes").returncode == 0
        assert holder.wait(30) == 76
    finally:
        holder.kill()
        holder.communicate()
    assert run_lockrun(local_env, "-n", name, "--once", key, "--", "true").returncode == 0
    assert run_lockrun(local_env, "-n", name, "--once", key, "--", "true").returncode == 0
    assert [row["status"] for row in history(local_env, name)][:2] == ["duplicate", "succeeded"]
    for _folder, _, files in os.walk(tmp_path / "state"):
        assert all(len(f.encode()) <= 255 for f in files), files


# --- data lockrun did not write never breaks it ----------------------------------------------------


def registered(client, name: str) -> None:
    """``name`` in the registry of names, as a lockrun run that took it leaves it: bare ``status``
    lists it (whatever its keys hold now)."""
    seconds, _ = client.time()
    client.zadd("lockrun:names", {name: seconds * 1000})


def test_an_info_hash_with_an_absurd_pid_hides_nothing(env, redis_server, tmp_path):
    client = redis_server.client()
    registered(client, "p")
    client.set("lockrun:{p}:lock", "tok", px=60000)
    client.hset("lockrun:{p}:info", mapping={"token": "tok", "host": hostname(), "pid": "9" * 20,
                                              "heartbeat_at": "[1]", "command": '{"not": "a list"}'})
    flag = tmp_path / "started"
    other = spawn_lockrun(env, "-n", "other", "--", "sh", "-c", f"touch {flag}; exec sleep 60")
    try:
        wait_until(flag.exists, what="a well-formed holder")
        locks = {lock["name"]: lock for lock in status_json(env)["locks"]}
        assert locks["other"]["state"] == "held"
        assert locks["p"]["state"] == "malformed" and "pid" in locks["p"]["problem"]
        assert locks["p"]["pid"] is None and locks["p"]["command"] == [] and locks["p"]["token"] == "tok"
        assert status_json(env, "p")["locks"][0]["state"] == "malformed"
        human = run_lockrun(env, "status")
        assert human.returncode == 0 and "p: malformed: " in human.stdout
    finally:
        other.terminate()
        other.wait(30)
    refused = run_lockrun(env, "unlock", "p", "--yes")
    assert refused.returncode == 1 and "malformed" in refused.stdout and "--force" in refused.stderr
    forced = run_lockrun(env, "unlock", "p", "--yes", "--force")
    assert forced.returncode == 0 and "None" not in forced.stdout, forced.stdout  # the pid is not valid: say so
    assert client.exists("lockrun:{p}:lock", "lockrun:{p}:info") == 0


def test_escape_sequences_in_records_reach_no_terminal(env, redis_server, tmp_path):
    """Anyone who can write to Redis could clear the operator's screen through a host name."""
    printed = run_lockrun(env, "-n", "tail", "--capture-tail", "1k", "--", "sh", "-c",
                          "printf 'ok\\n\\033[31mred\\tcell\\n'; exit 3")
    assert printed.returncode == 3 and "\x1b[31m" in printed.stdout  # the command's own output passes as it is
    (run,) = json.loads(run_lockrun(env, "history", "--fleet", "tail", "--json").stdout)
    client = redis_server.client()
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    registered(client, "esc")
    client.set("lockrun:{esc}:lock", "tok", px=60000)
    client.hset("lockrun:{esc}:info", mapping={
        "token": "tok", "run_id": "e" * 32, "host": "h\x1b[2Jx", "boot_id": "elsewhere", "pid": "4242",
        "pid_start": "1", "command": json.dumps(["job", "\x1b]0;owned\x07"]), "started_at": now,
        "heartbeat_at": now, "ttl_ms": "60000", "fencing_token": "7"})
    client.hset("lockrun:{esc}:last", mapping={"run_id": "f" * 32, "row": json.dumps(
        {"run_id": "f" * 32, "name": "esc", "status": "failed", "exit_code": 3, "host": "o\x1bther",
         "command": ["x"], "started_at": now, "ended_at": now})})
    shown = [run_lockrun(env, "status"), run_lockrun(env, "unlock", "esc", "--yes"),
             run_lockrun(env, "-v", "-n", "esc", "--", "true"), run_lockrun(env, "show", run["run_id"], "--fleet")]
    for result in shown:
        assert "\x1b" not in result.stdout + result.stderr and "\x07" not in result.stdout + result.stderr, result
    assert [r.returncode for r in shown] == [0, 1, 75, 0], [(r.returncode, r.stderr) for r in shown]
    assert "h\\x1b[2Jx" in shown[0].stdout and "o\\x1bther" in shown[0].stdout
    assert "h\\x1b[2Jx" in shown[1].stdout and "h\\x1b[2Jx" in shown[2].stderr
    assert "ok\n\\x1b[31mred\tcell\n" in shown[3].stdout  # lines and tabs kept, the escape shown
    assert json.loads(run_lockrun(env, "status", "--json", "esc").stdout)["locks"][0]["host"] == "h\x1b[2Jx"


def test_a_lock_key_of_another_type_is_malformed_and_unlock_clears_it(env, redis_server, tmp_path):
    client = redis_server.client()
    client.lpush("lockrun:{x}:lock", "junk")
    ran = tmp_path / "ran"
    busy = run_lockrun(env, "-v", "-n", "x", "--", "touch", str(ran))
    assert_one_line(busy, 75, "lockrun:{x}:lock is a list, not a string", "lockrun unlock x")
    assert "freed when that process exits" not in busy.stderr and not ran.exists()
    (row,) = history(env, "x")
    assert row["status"] == "busy" and "malformed" in row["note"]
    (lock,) = status_json(env)["locks"]
    assert (lock["name"], lock["state"]) == ("x", "malformed") and "list" in lock["problem"]
    cleared = run_lockrun(env, "unlock", "x", "--yes")  # no --force: no lockrun lease can live in a list
    assert cleared.returncode == 0 and "cleared 'x'" in cleared.stdout, cleared.stderr
    assert client.exists("lockrun:{x}:lock") == 0
    assert run_lockrun(env, "-n", "x", "--", "touch", str(ran)).returncode == 0 and ran.exists()


def test_a_slots_key_of_another_type_is_malformed_and_unlock_clears_it(env, redis_server):
    client = redis_server.client()
    client.set("lockrun:{s}:slots", "junk")
    registered(client, "s")
    (lock,) = status_json(env)["locks"]
    assert (lock["name"], lock["state"]) == ("s", "malformed") and "sorted set" in lock["problem"]
    assert run_lockrun(env, "unlock", "s", "--yes").returncode == 0
    assert client.exists("lockrun:{s}:slots") == 0
    assert run_lockrun(env, "-n", "s", "--slots", "2", "--", "true").returncode == 0


def test_a_lock_without_a_ttl_is_malformed_and_needs_force(env, redis_server, tmp_path):
    client = redis_server.client()
    client.set("lockrun:{y}:lock", "tok")  # no PX: lockrun never writes one
    assert_one_line(run_lockrun(env, "-n", "y", "--", "true"), 75, "no expiry", "lockrun unlock --force y")
    (lock,) = status_json(env, "y")["locks"]
    assert lock["state"] == "malformed" and "no expiry" in lock["problem"] and lock["ttl_remaining_s"] is None
    assert run_lockrun(env, "unlock", "y", "--yes").returncode == 1
    assert run_lockrun(env, "unlock", "y", "--yes", "--force").returncode == 0
    assert run_lockrun(env, "-n", "y", "--", "true").returncode == 0


def test_an_info_key_of_another_type_is_one_line_and_force_clears_it(env, redis_server, tmp_path):
    client = redis_server.client()
    client.set("lockrun:{z}:lock", "tok", px=60000)
    client.set("lockrun:{z}:info", "junk")
    ran = tmp_path / "ran"
    assert_one_line(run_lockrun(env, "-n", "z", "--", "touch", str(ran)), 69, "did not write",
                    "lockrun unlock --force z")
    assert not ran.exists()
    (lock,) = status_json(env)["locks"]
    assert lock["state"] == "malformed" and "not a hash" in lock["problem"]
    assert run_lockrun(env, "unlock", "z", "--yes", "--force").returncode == 0
    assert run_lockrun(env, "-n", "z", "--", "true").returncode == 0


def test_a_fence_counter_that_is_no_number_names_the_key_and_is_never_reset(env, redis_server):
    client = redis_server.client()
    client.set("lockrun:{f}:fence", "abc")
    assert_one_line(run_lockrun(env, "-n", "f", "--", "true"), 69, "lockrun:{f}:fence holds 'abc', not a number",
                    "never resets a fence counter")
    assert run_lockrun(env, "unlock", "f", "--yes", "--force").stdout == "'f' is not held\n"
    assert client.get("lockrun:{f}:fence") == b"abc"  # the operator's call, not lockrun's
    client.set("lockrun:{f}:fence", "41")
    assert run_lockrun(env, "-n", "f", "--", "true").returncode == 0
    assert history(env, "f")[0]["fencing_token"] >= 42


def test_a_local_description_with_a_list_heartbeat(local_env, tmp_path):
    flag = tmp_path / "started"
    holder = spawn_lockrun(local_env, "-n", "hb", "--ttl", "2", "--", "sh", "-c", f"touch {flag}; exec sleep 60")
    try:
        wait_until(flag.exists, what="the holder")
        description = tmp_path / "state" / "locks" / "hb.json"
        record = json.loads(description.read_text())
        description.write_text(json.dumps({**record, "heartbeat_at": [1], "pid_start": {"x": 1}, "ttl_ms": -5}))
        (lock,) = status_json(local_env)["locks"]
        assert lock["state"] == "malformed" and lock["pid"] == holder.pid and "heartbeat_at" in lock["problem"]
        assert run_lockrun(local_env, "unlock", "hb", "--yes").returncode == 1  # its holder is alive
        assert run_lockrun(local_env, "unlock", "hb", "--yes", "--force").returncode == 0
        assert holder.wait(30) == 76
    finally:
        holder.kill()
        holder.wait()


def test_a_fifo_in_the_locks_directory_does_not_hang_anything(local_env, tmp_path):
    assert run_lockrun(local_env, "-n", "warmup", "--", "true").returncode == 0
    fifo = tmp_path / "state" / "locks" / "f.lock"
    os.mkfifo(fifo)
    (tmp_path / "state" / "locks" / "warmup.json").unlink()
    os.mkfifo(tmp_path / "state" / "locks" / "warmup.json")  # a description that is a FIFO, too
    (lock,) = status_json(local_env)["locks"]
    assert (lock["name"], lock["state"]) == ("f", "malformed") and "FIFO" in lock["problem"]
    assert status_json(local_env, "f", "warmup")["locks"][1]["state"] == "free"
    assert_one_line(run_lockrun(local_env, "-n", "f", "--", "true", timeout=30), 69, "FIFO", "lockrun unlock f")
    assert run_lockrun(local_env, "-n", "warmup", "--", "true", timeout=30).returncode == 0
    assert run_lockrun(local_env, "unlock", "f", "--yes", timeout=30).returncode == 0
    assert not fifo.exists()
    assert run_lockrun(local_env, "-n", "f", "--", "true").returncode == 0


# --- no signal leaves lockrun waiting forever -------------------------------------------------------


def test_sigterm_to_lockrun_whose_command_ignores_it(any_env, tmp_path):
    pidfile = tmp_path / "pid"
    proc = spawn_lockrun(any_env, "-n", "stubborn", "--kill-after", "1", "--", "sh", "-c",
                         f"trap '' TERM; echo $$ > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; "
                         "while :; do sleep 0.1; done")
    wait_until(pidfile.exists, what="the command")
    command_pid = int(pidfile.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 128 + signal.SIGKILL
    assert not pid_alive(command_pid)
    (row,) = history(any_env, "stubborn")
    assert (row["status"], row["signal"]) == ("killed", signal.SIGKILL)
    assert "--kill-after 1s after signal 15" in row["note"]


# --- files opened safely and privately ------------------------------------------------------------


def _shared_state_dir(tmp_path) -> tuple[Path, Path, Path]:
    """A state directory anyone may write to, with links another user planted in it."""
    state = tmp_path / "shared"
    (state / "locks").mkdir(parents=True)
    os.chmod(state, 0o777)
    os.chmod(state / "locks", 0o777)
    victim, victim2 = tmp_path / "victim", tmp_path / "victim2"
    (state / "locks" / "job.lock").symlink_to(victim)
    (state / "ledger.db").symlink_to(victim2)
    for path in (state, state / "locks"):
        os.chown(path, OTHER_UID, OTHER_UID)
    for path in (state / "locks" / "job.lock", state / "ledger.db"):
        os.lchown(path, OTHER_UID, OTHER_UID)
    return state, victim, victim2


def test_a_state_directory_others_can_write_is_refused(any_env, tmp_path):
    state, victim, victim2 = _shared_state_dir(tmp_path)
    any_env["LOCKRUN_STATE_DIR"] = str(state)
    ran = tmp_path / "ran"
    result = run_lockrun(any_env, "-n", "job", "--", "touch", str(ran))
    if "LOCKRUN_REDIS_URL" in any_env:  # the lock is in Redis: the command runs, without a ledger row
        assert result.returncode == 0 and ran.exists()
        assert result.stderr.count("\n") == 1 and f"owned by uid {OTHER_UID}" in result.stderr
        assert "runs regardless" in result.stderr
    else:
        assert_one_line(result, 69, f"the state directory {state}", f"owned by uid {OTHER_UID}")
        assert not ran.exists()
    assert not victim.exists() and not victim2.exists()
    assert_one_line(run_lockrun(any_env, "history"), 1, "cannot read the run ledger")
    # Ours, but writable by everyone (a state directory in /tmp made by hand): refused just the same.
    for path in (state, state / "locks"):
        os.chown(path, 0, 0)
    if "LOCKRUN_REDIS_URL" not in any_env:
        assert_one_line(run_lockrun(any_env, "-n", "job", "--", "touch", str(ran)), 69, "writable by group or others")


def test_links_planted_in_the_state_directory_are_not_followed(any_env, tmp_path):
    state = tmp_path / "state"
    assert run_lockrun(any_env, "-n", "warmup", "--", "true").returncode == 0
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (state / "ledger.db-wal").unlink(missing_ok=True)
    (state / "ledger.db-wal").symlink_to(victim)
    result = run_lockrun(any_env, "-n", "job", "--", "true")
    assert result.returncode == 0 and "ledger.db-wal is a symbolic link" in result.stderr
    os.unlink(state / "ledger.db-wal")
    if "LOCKRUN_REDIS_URL" not in any_env:
        (state / "locks" / "job.lock").unlink()
        (state / "locks" / "job.lock").symlink_to(victim)
        assert_one_line(run_lockrun(any_env, "-n", "job", "--", "true"), 69, "symbolic link")
        os.unlink(state / "locks" / "job.lock")
        (state / "locks" / "job.json").unlink()
        (state / "locks" / "job.json").symlink_to(victim)  # replaced by a rename, never written through
        assert run_lockrun(any_env, "-n", "job", "--", "true").returncode == 0
        assert not (state / "locks" / "job.json").is_symlink()
    assert victim.read_text() == "precious\n"


def test_what_lockrun_creates_is_private(any_env, tmp_path):
    flag = tmp_path / "started"
    proc = spawn_lockrun(any_env, "-n", "job", "--capture-tail", "1k", "--", "sh", "-c",
                         f"touch {flag}; exec sleep 60", preexec_fn=lambda: os.umask(0o022))
    try:
        wait_until(flag.exists, what="the command")
        state = tmp_path / "state"
        wait_until(lambda: (state / "ledger.db-wal").exists(), what="the WAL")
        modes = {p.name: p.stat().st_mode & 0o777 for p in [state, *state.rglob("*")]}
        assert modes.pop("state") == 0o700
        for name, mode in modes.items():
            assert mode == (0o700 if (state / name).is_dir() or name == "locks" else 0o600), (name, oct(mode))
        assert {"ledger.db", "ledger.db-wal", "ledger.db-shm"} <= set(modes)
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_metrics_file_that_is_a_directory_leaves_nothing_behind(any_env, tmp_path):
    target = tmp_path / "metrics"
    target.mkdir()
    result = run_lockrun(any_env, "-n", "m", "--metrics-file", str(target), "--", "touch", str(tmp_path / "ran"))
    assert result.returncode == 2 and "is a directory" in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "ran").exists()  # refused before the command runs (contract §16)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


# --- credentials stay with lockrun ----------------------------------------------------------------


@pytest.fixture
def secret_server():
    server = RedisServer(password="s3cret-pw").start()
    yield server
    server.cleanup()


def test_the_command_does_not_inherit_the_redis_password(tmp_path, secret_server):
    env = {**isolated_env(tmp_path), "LOCKRUN_REDIS_URL": secret_server.url}
    seen = tmp_path / "seen"
    result = run_lockrun(env, "-n", "env", "--", "sh", "-c",
                         f"env > {seen}; tr '\\0' '\\n' < /proc/$$/environ >> {seen}")
    assert result.returncode == 0, result.stderr
    text = seen.read_text()
    assert "s3cret-pw" not in text
    assert f"LOCKRUN_REDIS_URL=unix://{secret_server.socket}" in text


def test_a_password_file_keeps_the_password_out_of_argv_and_env(tmp_path, secret_server):
    env = isolated_env(tmp_path)
    url = f"unix://{secret_server.socket}"
    assert_one_line(run_lockrun(env, "--redis-url", url, "-n", "a", "--", "true"), 69,
                    "requires a password and none was given")
    secret = tmp_path / "redis.pass"
    secret.write_text("s3cret-pw\n")
    os.chmod(secret, 0o600)
    env["LOCKRUN_REDIS_PASSWORD_FILE"] = str(secret)
    assert run_lockrun(env, "--redis-url", url, "-n", "a", "--", "true").returncode == 0
    assert run_lockrun(env, "status", "--redis-url", url).returncode == 0
    env.pop("LOCKRUN_REDIS_PASSWORD_FILE")
    config = tmp_path / "lockrun.toml"
    config.write_text(f'redis_url = "{url}"\nredis_password_file = "{secret}"\n')
    env["LOCKRUN_CONFIG"] = str(config)
    assert run_lockrun(env, "-n", "a", "--", "true").returncode == 0
    os.chmod(secret, 0o644)
    assert_one_line(run_lockrun(env, "-n", "a", "--", "true"), 78, "can be read by others")
    os.chmod(secret, 0o600)
    os.chown(secret, OTHER_UID, OTHER_UID)
    assert_one_line(run_lockrun(env, "status"), 78, f"owned by uid {OTHER_UID}")
    secret.unlink()
    assert_one_line(run_lockrun(env, "status"), 78, "Redis password file", "cannot read it")
    secret.mkdir()
    assert_one_line(run_lockrun(env, "status"), 78, "Redis password file", "is not a regular file")
    assert_one_line(run_lockrun({**env, "LOCKRUN_CONFIG": str(tmp_path)}, "status"), 78,
                    "config file", "is not a regular file")
    assert "s3cret-pw" not in json.dumps(history(env))


def test_a_config_file_owned_by_another_user_is_refused(env, tmp_path):
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    config = sticky / "lockrun.toml"
    config.write_text("ttl = 5\n")
    os.chmod(config, 0o644)
    os.chown(config, OTHER_UID, OTHER_UID)
    env["LOCKRUN_CONFIG"] = str(config)
    assert_one_line(run_lockrun(env, "status"), 78, f"owned by uid {OTHER_UID}")
    assert_one_line(run_lockrun(env, "-n", "c", "--", "true"), 78, f"owned by uid {OTHER_UID}")
    os.chown(config, 0, 0)
    assert run_lockrun(env, "status").returncode == 0
    os.chmod(config, 0o664)
    assert_one_line(run_lockrun(env, "status"), 78, "writable by group or others")


# --- wrong or misleading answers --------------------------------------------------------------------


def test_global_options_before_a_subcommand(tmp_path, redis_server):
    env = isolated_env(tmp_path)
    config = tmp_path / "redis.toml"
    config.write_text(f'redis_url = "{redis_server.url}"\n')
    for args in (["--config", str(config), "status"], [f"--config={config}", "status", "--json"],
                 ["--redis-url", redis_server.url, "--prefix", "p:", "status"]):
        result = run_lockrun(env, *args)
        assert result.returncode == 0 and "redis" in result.stdout, (args, result.stderr)
    assert run_lockrun(env, "--config", str(config), "history", "--json").stdout == "[]\n"
    assert run_lockrun(env, "--config", str(config), "unlock", "x").stdout == "'x' is not held\n"
    assert history(env) == []  # no run of a command named "status"
    # After "--" the next word is the command, as always.
    assert run_lockrun(env, "--config", str(config), "--", "status").returncode == 127
    # A run option first makes the next word the command: no program of that name, so a hint.
    assert_one_line(run_lockrun(env, "-v", "status"), 127, "status: command not found in PATH",
                    "for lockrun's own 'status', put it first: lockrun status [OPTIONS]")


def _fill(folder: Path) -> None:
    with open(folder / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


@pytest.fixture
def small_mount(tmp_path):
    """mount(tmpfs) on a directory of this test, when the machine lets us; None when not."""
    folder = tmp_path / "mnt"
    folder.mkdir()
    mounted = []

    def mount(options: str):
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
        if result.returncode != 0:
            return None
        mounted.append(folder)
        return folder

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _broken_state_dir(state: Path, kind: str) -> str:
    """Make ``state`` a file or a dangling link; return what lockrun's line must say of it."""
    if kind == "file":
        state.write_text("")
        return "is a file, not a directory"
    state.symlink_to(state.parent / "nowhere")
    return "is a symbolic link to"


@pytest.mark.parametrize("kind", ["file", "dangling-link", "read-only", "full"])
def test_an_unusable_state_directory_is_one_line_with_its_real_cause(any_env, tmp_path, kind, small_mount):
    state, limit = tmp_path / "state-dir", None
    if kind in ("file", "dangling-link"):
        needle = _broken_state_dir(state, kind)
    elif kind == "read-only":
        state = small_mount("ro,mode=0700")
        needle = "read-only file system"
        if state is None:  # no mount here: a directory only another user may write says the same kind of thing
            state = tmp_path / "theirs"
            state.mkdir(mode=0o700)
            os.chown(state, OTHER_UID, OTHER_UID)
            needle = f"owned by uid {OTHER_UID}"
    else:
        state = small_mount("size=256k,mode=0700")
        needle = "No space left on device"
        if state is None:  # no mount here: a file-size limit makes every write fail the same way
            state, limit, needle = tmp_path / "limited", 0, "File too large"
            state.mkdir(mode=0o700)
        else:
            _fill(state)
    any_env["LOCKRUN_STATE_DIR"] = str(state)
    ran = tmp_path / "ran"

    def limited():
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = run_lockrun(any_env, "-n", "s", "--", "touch", str(ran), preexec_fn=limited)
    assert "Traceback" not in result.stderr and "cannot rollback" not in result.stderr
    if "LOCKRUN_REDIS_URL" in any_env:  # the state directory only holds the ledger: one warning, and it runs
        assert result.returncode == 0 and ran.exists(), result.stderr
        assert result.stderr.count("\n") == 1 and "runs regardless" in result.stderr, result.stderr
    else:
        assert_one_line(result, 69, needle)
        assert "runs regardless" not in result.stderr and not ran.exists()


@pytest.mark.parametrize("kind", ["file", "dangling-link", "writable-by-others"])
def test_readers_name_an_unusable_state_directory_that_has_no_ledger_yet(local_env, tmp_path, kind):
    """Not "no runs recorded": no run could have kept a ledger there, and the reader says why."""
    state = tmp_path / "state-dir"
    if kind in ("file", "dangling-link"):
        needle = _broken_state_dir(state, kind)
    else:
        state.mkdir()
        os.chmod(state, 0o1777)
        needle = "writable by group or others"
    local_env["LOCKRUN_STATE_DIR"] = str(state)
    for args in (("history",), ("show", "abcd"), ("metrics",), ("timeline",), ("prune", "--older-than", "1d")):
        assert_one_line(run_lockrun(local_env, *args), 1, needle)
    warned = run_lockrun(local_env, "status")
    assert "Traceback" not in warned.stderr and needle in warned.stderr, warned.stderr
    fresh = {**local_env, "LOCKRUN_STATE_DIR": str(tmp_path / "never-used")}  # nothing ran yet: no error
    assert run_lockrun(fresh, "history").stdout == "no runs recorded\n"


def test_a_corrupt_or_unreadable_ledger_is_an_error_for_history_and_show(any_env, tmp_path):
    ledger = tmp_path / "state" / "ledger.db"
    ledger.parent.mkdir(mode=0o700)
    ledger.write_bytes(b"this is not a database" * 100)
    for args in (["history"], ["history", "--json"], ["show", "abcd1234"], ["metrics"]):
        result = run_lockrun(any_env, *args)
        assert_one_line(result, 1, "cannot read the run ledger", "file is not a database")
        assert result.stdout == ""
    status = run_lockrun(any_env, "status")
    assert status.returncode == 0 and "cannot read the run ledger" in status.stderr
    ledger.unlink()
    ledger.mkdir()
    assert_one_line(run_lockrun(any_env, "history"), 1, "cannot read the run ledger", "not a regular file")


# --- a lost acquire reply under --slots gives back the slot ---------------------------------------


class ReplyEater:
    """A TCP proxy to Redis that swallows every reply on its first connection: the acquire
    runs on the server, its reply never arrives. Later connections pass through."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            self.sockets += [client, server]
            eat = self.connections == 0
            self.connections += 1
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, eat), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket, eat: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if not eat:
                    target.sendall(chunk)
        except OSError:
            pass

    def close(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            sock.close()


def test_ledger_rows_of_any_type_never_break_the_backend_hint(local_env):
    """The "this host's latest runs used another backend" note reads rows someone else may have written."""
    assert run_lockrun(local_env, "-n", "g", "--", "true").returncode == 0
    ledger = Path(local_env["LOCKRUN_STATE_DIR"]) / "ledger.db"
    for assignment in ("started_at = X'FFFE', backend_where = '/elsewhere'",
                       "started_at = '2999-01-01T00:00:00.000000Z', backend = 'redis'",
                       "backend = X'00', backend_where = 'redis://h:6379/0'",
                       "backend = 'redis', backend_where = 7, backend_from = X'01'"):
        db = sqlite3.connect(ledger)
        db.execute(f"UPDATE runs SET {assignment}")
        db.commit()
        db.close()
        for args in (("history",), ("history", "--json"), ("status",), ("unlock", "g")):
            result = run_lockrun(local_env, *args)
            assert result.returncode == 0 and "internal error" not in result.stderr, (assignment, args, result.stderr)
            assert "note:" not in result.stderr, (assignment, result.stderr)  # no evidence: no hint


def test_a_ledger_row_whose_name_is_a_blob_does_not_hang_the_timeline(local_env):
    assert run_lockrun(local_env, "-n", "g", "--", "true").returncode == 0
    db = sqlite3.connect(Path(local_env["LOCKRUN_STATE_DIR"]) / "ledger.db")
    db.execute("INSERT INTO runs (run_id, name, status, host, pid, command, backend, started_at, ended_at, duration_s)"
               " SELECT 'f' || run_id, X'FFFE', status, host, pid, command, backend, started_at, ended_at, 1.0"
               " FROM runs")
    db.commit()
    db.close()
    for args in (("timeline",), ("timeline", "--by-host"), ("timeline", "--svg", "-")):
        result = run_lockrun(local_env, *args, timeout=60)  # it looped for ever on the BLOB
        assert result.returncode == 0 and "internal error" not in result.stderr, (args, result.stderr)
    assert "g " in run_lockrun(local_env, "timeline").stdout


def test_a_lost_acquire_reply_under_slots_gives_back_the_slot(tmp_path, redis_server):
    proxy = ReplyEater(redis_server.port)
    try:
        env = {**isolated_env(tmp_path), "LOCKRUN_REDIS_URL": f"redis://127.0.0.1:{proxy.port}/0"}
        ran = tmp_path / "ran"
        result = run_lockrun(env, "-n", "sem", "--slots", "3", "--ttl", "2", "--", "touch", str(ran))
        assert_one_line(result, 69, "unavailable")
        assert not ran.exists() and proxy.connections >= 2
    finally:
        proxy.close()
    client = redis_server.client()
    assert client.zcard("lockrun:{sem}:slots") == 0  # the slot the acquire took was given back
    assert client.exists("lockrun:{sem}:lock") == 0
    assert list(client.scan_iter("lockrun:{sem}:slot:*")) == []


# --- after the spawn, nothing releases the lock while the command runs on -----------------------------


NO_KEEPER_THREAD = """
import threading
_start = threading.Thread.start
def start(self):
    if self.name == "lockrun-keeper":
        raise RuntimeError("can't start new thread")
    return _start(self)
threading.Thread.start = start
"""


def _processes_running(argv: list[str]) -> list[int]:
    wanted = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == wanted and pid_alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_keeper_that_cannot_start_stops_the_command_before_the_release(any_env, tmp_path):
    # sleep inherits the ignored SIGTERM: only the SIGKILL after --kill-after ends it.
    result = injected(NO_KEEPER_THREAD, any_env, "-n", "k", "--kill-after", "1", "--", "sh", "-c",
                      "trap '' TERM; exec sleep 31.337")
    assert_one_line(result, 76, "the lease keeper could not start")
    assert _processes_running(["sleep", "31.337"]) == []
    (row,) = history(any_env, "k")
    assert row["status"] == "lost"
    assert status_json(any_env, "k")["locks"][0]["state"] == "free"


NO_PING_THREAD = NO_KEEPER_THREAD.replace("lockrun-keeper", "lockrun-ping")


def test_a_ping_thread_that_cannot_start_is_only_a_failed_delivery(any_env, tmp_path):
    result = injected(NO_PING_THREAD, any_env, "-n", "p", "--ping", "http://127.0.0.1:9/check", "--", "true")
    assert result.returncode == 0 and "start ping not sent" in result.stderr
    assert history(any_env, "p")[0]["status"] == "succeeded"


NO_TIMER = """
import ctypes, errno
import lockrun.run.backstop as backstop
def refuse(*args):
    ctypes.set_errno(errno.EPERM)
    return -1
backstop._timer_api = lambda: (ctypes, refuse, refuse)
"""


def test_a_backstop_timer_the_kernel_refuses_is_a_warning_and_a_note(any_env):
    result = injected(NO_TIMER, any_env, "-n", "t", "--", "echo", "ran")
    assert result.returncode == 0 and result.stdout == "ran\n"
    assert_one_line(result, 0, "no backstop timer (timer_create failed: Operation not permitted)")
    (row,) = history(any_env, "t")
    assert row["status"] == "succeeded" and "no backstop timer" in row["note"]


def test_a_backstop_that_cannot_be_rearmed_retires_instead_of_killing_lockrun_early(any_env):
    rearm_fails = """
import ctypes, errno
import lockrun.run.backstop as backstop
real = backstop._timer_api()
calls = []
def settime(*args):
    calls.append(1)
    if len(calls) == 2:  # the first renewal's re-arm
        ctypes.set_errno(errno.EINVAL)
        return -1
    return real[2](*args)
backstop._timer_api = lambda: (ctypes, real[1], settime)
"""
    started = time.monotonic()
    result = injected(rearm_fails, any_env, "-q", "-n", "r", "--ttl", "1", "--", "sleep", "2.5")
    assert result.returncode == 0, result.stderr  # not SIGKILLed at the first lease's end
    assert time.monotonic() - started >= 2.5
    assert "timer_settime failed" in history(any_env, "r")[0]["note"]
