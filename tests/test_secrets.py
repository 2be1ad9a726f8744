"""Nothing secret leaves the host (docs/fleet.md "What is published"): a command line carrying a URL
password, a --password= value and a bearer token runs under lockrun; then everything the Redis
server holds, history --fleet, status (while held), show --fleet, the webhook body and the ledger
are searched for the three secrets, and must still say what ran."""

from __future__ import annotations

import json
import signal

import pytest
import redis

from tests.conftest import assert_one_line, history, run_lockrun, spawn_lockrun, wait_until
from tests.test_notify import Receiver

URL_PASSWORD = "hunter2UrlPw9"
PASSWORD = "s3cretFlagPw7"
BEARER = "abcBearerTok42"
SECRETS = (URL_PASSWORD, PASSWORD, BEARER)
#: The command's own words that are not secret: the record must still carry them.
SAID = ("postgresql://app:***@db.example/sales", "--password=***", "Authorization: Bearer ***", "--verbose")


def secret_argv(flag, release, code: int = 3) -> list[str]:
    """sh waits for ``release`` (after touching ``flag``), exits ``code``; the rest are its arguments."""
    script = f'touch "$1"; while [ ! -e "$2" ]; do sleep 0.02; done; exit {code}'
    return ["sh", "-c", script, "job", str(flag), str(release), f"postgresql://app:{URL_PASSWORD}@db.example/sales",
            f"--password={PASSWORD}", "-H", f"Authorization: Bearer {BEARER}", "--verbose"]


def everything_redis_holds(client: redis.Redis) -> bytes:
    """Every key and every value of every type, as one blob: SCAN, then each type's full read."""
    found = []
    for key in client.scan_iter(count=1000):
        found.append(key)
        kind = client.type(key).decode()
        if kind == "string":
            found.append(client.get(key) or b"")
        elif kind == "hash":
            for field, value in client.hgetall(key).items():
                found += [field, value]
        elif kind == "list":
            found += client.lrange(key, 0, -1)
        elif kind == "set":
            found += list(client.smembers(key))
        elif kind == "zset":
            found += [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            for entry_id, fields in client.xrange(key):
                found.append(entry_id)
                for field, value in fields.items():
                    found += [field, value]
        else:
            raise AssertionError(f"a key of type {kind} lockrun did not expect: {key!r}")
    return b"\n".join(found)


def assert_no_secret(text: str | bytes, where: str) -> None:
    data = text.encode() if isinstance(text, str) else text
    for secret in SECRETS:
        assert secret.encode() not in data, f"{secret} in {where}: {data[:2000]!r}"


def assert_says_what_ran(text: str | bytes, where: str) -> None:
    data = text.decode() if isinstance(text, bytes) else text
    for word in SAID:
        assert word in data, f"{word!r} not in {where}: {data[:2000]}"


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


def test_no_secret_of_the_command_line_leaves_the_host(env, redis_server, receiver, tmp_path):
    flag, release = tmp_path / "started", tmp_path / "release"
    # --retry: the attempts' ends and the next start are written by scripts of their own;
    # --slots: a slot holder's record; a busy skip meanwhile: the holder read back and counted.
    proc = spawn_lockrun(env, "-n", "backup", "--notify", f"{receiver.url}/hook", "--retry", "1", "--retry-delay", "0",
                         "--", *secret_argv(flag, release))
    slotted = spawn_lockrun(env, "-n", "batch", "--slots", "2", "--", *secret_argv(tmp_path / "s", release, 0))
    try:
        wait_until(lambda: flag.exists() and (tmp_path / "s").exists(), what="both commands running")
        busy = run_lockrun(env, "-n", "backup", "--notify", f"{receiver.url}/busy", "--notify-on", "busy", "--",
                           "true")
        assert busy.returncode == 75
        for args in (["status", "--json"], ["status", "--all", "--json"], ["status", "--all"], ["status", "backup"]):
            held = run_lockrun(env, *args)
            assert held.returncode == 0, held.stderr
            assert_no_secret(held.stdout + held.stderr, " ".join(args))
        locks = {lock["name"]: lock for lock in json.loads(run_lockrun(env, "status", "--json").stdout)["locks"]}
        assert_says_what_ran(json.dumps(locks["backup"]["command"]), "status --json")
        assert_says_what_ran(json.dumps(locks["batch"]["command"]), "status --json")
        assert_no_secret(everything_redis_holds(redis_server.client()), "Redis while held")
        release.touch()
        assert proc.wait(timeout=60) == 3 and slotted.wait(timeout=60) == 0
    finally:
        release.touch()
        for running in (proc, slotted):
            running.send_signal(signal.SIGKILL)
            running.wait()

    dump = everything_redis_holds(redis_server.client())
    assert_no_secret(dump, "Redis")
    assert b"lockrun:{backup}:runs" in dump and b"lockrun:{batch}:runs" in dump  # the record was written
    assert_says_what_ran(dump, "Redis")

    fleet = run_lockrun(env, "history", "--fleet", "--json")
    rows = json.loads(fleet.stdout)
    assert {row["name"] for row in rows} == {"backup", "batch"} and len(rows) == 3  # two attempts, one slot run
    assert_no_secret(fleet.stdout, "history --fleet --json")
    for row in rows:
        assert row["command"][0] == "sh" and row["command"][3] == "job"
        assert_says_what_ran(json.dumps(row["command"]), "history --fleet")
    table = run_lockrun(env, "history", "--fleet")
    assert_no_secret(table.stdout, "history --fleet")
    shown = run_lockrun(env, "show", rows[0]["run_id"], "--fleet", "--json")
    assert shown.returncode == 0 and rows[0]["run_id"] in shown.stdout
    assert_no_secret(shown.stdout, "show --fleet")
    assert_no_secret(run_lockrun(env, "status", "--all", "--json").stdout, "status --all, after")

    # The ledger keeps the command as it is recorded everywhere: masked too.
    assert_no_secret(json.dumps(history(env)), "history --json")
    assert_says_what_ran(json.dumps(history(env, "backup")[0]["command"]), "history --json")

    bodies = receiver.json_bodies()
    assert [body["status"] for body in bodies if body["name"] == "backup"] == ["busy", "failed"]
    for request in receiver.requests:
        assert_no_secret(request["body"], f"the webhook body to {request['path']}")
    failed = next(body for body in bodies if body["status"] == "failed")
    assert_says_what_ran(json.dumps(failed["command"]), "the webhook's command")
    skipped = next(body for body in bodies if body["status"] == "busy")
    assert skipped["holder"] is not None
    assert_says_what_ran(json.dumps(skipped["holder"]["command"]), "the webhook's holder")


def test_the_local_backend_records_the_command_masked_too(local_env, tmp_path):
    flag, release = tmp_path / "started", tmp_path / "release"
    proc = spawn_lockrun(local_env, "-n", "backup", "--", *secret_argv(flag, release, 0))
    try:
        wait_until(flag.exists, what="the command running")
        for args in (["status", "--json"], ["status", "--all"]):
            held = run_lockrun(local_env, *args)
            assert held.returncode == 0 and "backup" in held.stdout, held.stdout + held.stderr
            assert_no_secret(held.stdout, " ".join(args))
        (lock,) = json.loads(run_lockrun(local_env, "status", "--json").stdout)["locks"]
        assert_says_what_ran(json.dumps(lock["command"]), "status --json")
        everything = b"".join(path.read_bytes() for path in (tmp_path / "state").rglob("*") if path.is_file())
        assert_no_secret(everything, "the state directory (its description files and the ledger)")
        release.touch()
        assert proc.wait(timeout=60) == 0
    finally:
        release.touch()
        proc.kill()
        proc.wait()
    assert_no_secret(json.dumps(history(local_env)), "history --json")


def test_what_the_command_left_behind_is_named_masked(env, redis_server):
    # A daemon that left the command's group is noted on the row with its command line.
    script = 'setsid sh -c "sleep 60" daemon --token=TokDaemonSecret1 postgresql://u:UrlDaemonSecret2@db/x &'
    result = run_lockrun(env, "-n", "leaves", "--", "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    note = history(env, "leaves")[0]["note"]
    assert "daemon --token=***" in note and "TokDaemonSecret1" not in note and "UrlDaemonSecret2" not in note
    dump = everything_redis_holds(redis_server.client())
    assert b"daemon --token=***" in dump and b"TokDaemonSecret1" not in dump and b"UrlDaemonSecret2" not in dump


def test_an_error_line_names_the_program_masked(any_env):
    result = run_lockrun(any_env, "-n", "nope", "--", "https://user:ProgSecret77@example.invalid/x")
    assert_one_line(result, 127, "https://user:***@example.invalid/x: command not found")
    assert "ProgSecret77" not in result.stderr
    row = history(any_env, "nope")[0]
    assert "ProgSecret77" not in json.dumps(row) and row["command"] == ["https://user:***@example.invalid/x"]


def test_the_users_own_rules_and_record_command(env, tmp_path, redis_server):
    config = tmp_path / "config.toml"
    config.write_text('redact = ["--sig", "DB_CRED", "re:sk_live_[A-Za-z0-9]+"]\n')
    argv = ["sh", "-c", "exit 0", "job", "--sig", "SigSecret1", "DB_CRED=CredSecret2", "pay:sk_live_Key3", "--plain"]
    assert run_lockrun(env, "-n", "own", "--", *argv).returncode == 0
    (row,) = json.loads(run_lockrun(env, "history", "--fleet", "--json", "own").stdout)
    assert row["command"] == ["sh", "-c", "exit 0", "job", "--sig", "***", "DB_CRED=***", "pay:***", "--plain"]
    config.write_text('record_command = false\n')
    assert run_lockrun(env, "-n", "bare", "--", *argv).returncode == 0
    (row,) = json.loads(run_lockrun(env, "history", "--fleet", "--json", "bare").stdout)
    assert row["command"] == ["sh"]
    dump = everything_redis_holds(redis_server.client())
    for secret in (b"SigSecret1", b"CredSecret2", b"sk_live_Key3"):
        assert secret not in dump


@pytest.mark.parametrize("line,needle", [
    ('redact = "--token"', "redact must be a list"),
    ('redact = ["re:("]', "not a regular expression"),
    ('redact = ["re:x*"]', "matches the empty text"),
    ('redact = ["two words"]', "not the entry 'two words'"),
    ('redact = [1]', "not the entry 1"),
    ('record_command = "no"', "record_command must be true or false"),
])
def test_bad_masking_config_is_78(local_env, tmp_path, line, needle):
    (tmp_path / "config.toml").write_text(line + "\n")
    assert_one_line(run_lockrun(local_env, "-n", "x", "--", "true"), 78, "line 1", needle)


def test_a_holder_recorded_unmasked_is_masked_in_the_webhook(env, redis_server, receiver, tmp_path):
    flag, release = tmp_path / "started", tmp_path / "release"
    proc = spawn_lockrun(env, "-n", "old", "--", *secret_argv(flag, release, 0))
    try:
        wait_until(flag.exists, what="the command running")
        # As a host that masks less (or someone else) wrote it: the command as ps shows it.
        raw = ["pg_dump", f"postgresql://app:{URL_PASSWORD}@db.example/sales", f"--password={PASSWORD}", "--verbose"]
        redis_server.client().hset("lockrun:{old}:info", "command", json.dumps(raw))
        busy = run_lockrun(env, "-n", "old", "--notify", f"{receiver.url}/busy", "--notify-on", "busy", "--", "true")
        assert busy.returncode == 75, busy.stderr
    finally:
        release.touch()
        assert proc.wait(timeout=60) == 0
    (body,) = receiver.json_bodies()
    assert body["holder"]["command"] == ["pg_dump", "postgresql://app:***@db.example/sales", "--password=***",
                                         "--verbose"]
    assert_no_secret(receiver.requests[0]["body"], "the webhook body")
