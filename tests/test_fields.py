"""Property tests: ``status``, ``unlock`` and ``history`` survive any value in a record lockrun reads back.

Holder records (Redis hash fields, local JSON descriptions) and ledger rows may have been
written by anyone. Whatever they hold, the commands answer with a documented exit code and
output that parses, and ``unlock --force`` can always clear the lock. The CLI runs in-process
(its exit code and output are what is checked); the Redis server and the lock holder are real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockrun.cli.main import main
from lockrun.core.record import Status
from lockrun.ledger.store import Ledger, RunRecord
from lockrun.system.host import boot_id, hostname, machine_id, pid_ns
from tests.conftest import REDIS_SERVER, RedisServer

FIELDS = ("token", "run_id", "host", "boot_id", "pid", "pid_start", "child_pid", "command", "started_at",
          "heartbeat_at", "ttl_ms", "fencing_token", "cooling_until", "cooling_until_epoch", "name", "pid_ns",
          "machine_id")
PROPERTY_SETTINGS = settings(max_examples=40, deadline=None,
                             suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Values that are almost right are the interesting ones: numbers just out of range, times
# that are not quite ISO, JSON of the wrong shape, this host's own name and boot id.
NEAR_MISSES = [
    "", "0", "-1", "1", "4194304", "4194305", "9" * 20, "-" + "9" * 40, "1e999", "nan", "inf", "0x10", " 7 ",
    "[1]", '["a", 1]', '{"a": 1}', '["sleep", "1"]', "null", "true", "[" * 500,
    "2026-01-01T00:00:00.000000Z", "9999-12-31T23:59:59.999999Z", "0001-01-01T00:00:00Z", "2026-13-45T99:99:99Z",
    "\x1b[31mred\x1b[0m", "[bold]markup[/bold]", "a\nb", "x" * 5000,
]


def near_miss_text():
    return st.one_of(st.sampled_from(NEAR_MISSES + [hostname(), boot_id(), machine_id(), str(pid_ns())]),
                     st.text(max_size=40))


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """lockrun's entry point in this process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as ended:
        main(list(args))
    out, err = capsys.readouterr()
    return ended.value.code, out, err


def assert_clean(code: int, err: str, allowed: tuple[int, ...]) -> None:
    assert code in allowed, (code, err)
    assert "internal error" not in err and "Traceback" not in err, err


@pytest.fixture(scope="module")
def shared_redis():
    if not REDIS_SERVER:
        pytest.fail("redis-server is not installed (apt-get install redis-server); .ci/run installs it")
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def lockrun_env(tmp_path, monkeypatch):
    for key in list(os.environ):
        if key.startswith("LOCKRUN_"):
            monkeypatch.delenv(key)
    config = tmp_path / "config.toml"
    config.write_text("")
    monkeypatch.setenv("LOCKRUN_CONFIG", str(config))
    monkeypatch.setenv("LOCKRUN_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NO_COLOR", "1")
    return tmp_path


def check_status_and_unlock(capsys, name: str) -> None:
    """What an operator would type, in order; each must answer without an internal error."""
    code, out, err = cli(capsys, "status", "--json")
    assert_clean(code, err, (0,))
    listed = json.loads(out)["locks"]
    assert all(lock["state"] in ("held", "zombie", "cooling", "malformed") for lock in listed)
    code, out, err = cli(capsys, "status", "--json", name)
    assert_clean(code, err, (0,))
    (lock,) = json.loads(out)["locks"]
    assert (lock["state"] == "malformed") == bool(lock["problem"])
    code, out, err = cli(capsys, "status")
    assert_clean(code, err, (0,))
    code, out, err = cli(capsys, "unlock", name)  # no terminal, no --yes: it may only refuse or find nothing
    assert_clean(code, err, (0, 1))
    code, out, err = cli(capsys, "unlock", name, "--yes")
    assert_clean(code, err, (0, 1))
    code, out, err = cli(capsys, "unlock", name, "--yes", "--force")
    assert_clean(code, err, (0,))
    code, out, err = cli(capsys, "status", "--json", name)
    assert json.loads(out)["locks"][0]["state"] == "free", out


# --- Redis: the lock key and its info hash ---------------------------------------------------------


redis_values = st.one_of(near_miss_text().map(lambda text: text.encode("utf-8", "surrogatepass")),
                         st.binary(max_size=40))


@PROPERTY_SETTINGS
@given(
    lock=st.one_of(st.tuples(st.just("string"), st.one_of(st.text(max_size=40).map(str.encode), st.binary(max_size=8)),
                             st.sampled_from([None, 60000, 10 ** 12])),
                   st.tuples(st.sampled_from(["list", "hash", "set"]), st.just(b"x"), st.just(None))),
    fields=st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8)), redis_values, max_size=len(FIELDS)),
    info_kind=st.sampled_from(["hash", "hash", "hash", "string", "none"]),
)
def test_redis_holders_with_any_field_values(capsys, lockrun_env, monkeypatch, shared_redis, lock, fields, info_kind):
    monkeypatch.setenv("LOCKRUN_REDIS_URL", shared_redis.url)
    client = shared_redis.client()
    client.flushall()
    kind, value, px = lock
    key, info = "lockrun:{h}:lock", "lockrun:{h}:info"
    if kind == "string":
        client.set(key, value, px=px)
    elif kind == "list":
        client.rpush(key, value)
    elif kind == "hash":
        client.hset(key, "f", value)
    else:
        client.sadd(key, value)
    if info_kind == "hash" and fields:
        client.hset(info, mapping={k.encode("utf-8", "surrogatepass"): v for k, v in fields.items()})
    elif info_kind == "string":
        client.set(info, b"junk")
    check_status_and_unlock(capsys, "h")
    assert client.exists(key) == 0


# --- local: the kernel lock's holder and its JSON description ----------------------------------


HOLDER = r"""
import fcntl, os, sys
fd = None
for line in sys.stdin:
    if fd is not None:
        os.close(fd)
        fd = None
    if line.startswith("lock "):
        fd = os.open(line[5:].strip(), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("ok", flush=True)
"""


@pytest.fixture
def lock_holder():
    """Another process that takes or drops the POSIX lock on a file when told (F_GETLK names it)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def tell(line: str) -> None:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "ok\n"

    tell.pid = proc.pid
    yield tell
    proc.stdin.close()
    proc.wait(30)
    proc.stdout.close()


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10 ** 30), max_value=10 ** 30),
              st.floats(allow_nan=True, allow_infinity=True), near_miss_text()),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)


@PROPERTY_SETTINGS
@given(
    fields=st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8)), json_values, max_size=len(FIELDS)),
    whole=st.one_of(st.none(), json_values),
    held=st.booleans(),
    our_pid=st.booleans(),
    cooling=st.booleans(),
)
def test_local_holders_with_any_description(capsys, lockrun_env, lock_holder, fields, whole, held, our_pid, cooling):
    locks = lockrun_env / "state" / "locks"
    locks.mkdir(parents=True, mode=0o700, exist_ok=True)
    os.chmod(lockrun_env / "state", 0o700)
    description = dict(fields)
    if our_pid:
        description["pid"] = lock_holder.pid  # the description is the kernel lock holder's own
    if cooling:
        description["cooling_until_epoch"] = 4102444800  # 2100: a --min-hold not over yet
    document = description if whole is None else whole  # sometimes not even a JSON object
    (locks / "h.json").write_text(json.dumps(document))
    lock_holder(f"lock {locks / 'h.lock'}" if held else "drop")
    check_status_and_unlock(capsys, "h")


# --- the ledger: rows through the ledger API -------------------------------------------------------


ledger_ints = st.one_of(st.none(), st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1))


@PROPERTY_SETTINGS
@given(
    name=near_miss_text(),
    command=st.lists(near_miss_text(), max_size=4),
    host=near_miss_text(),
    pid=st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1),
    pid_start=ledger_ints,
    status=st.one_of(st.sampled_from([status.value for status in Status]), near_miss_text()),
    exit_code=ledger_ints,
    signal=ledger_ints,
    fencing_token=ledger_ints,
    duration_s=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    started_at=near_miss_text(),
    text=st.one_of(st.none(), near_miss_text()),
    tail=st.one_of(st.none(), st.text(max_size=200)),
)
def test_history_show_and_metrics_with_any_ledger_row(capsys, lockrun_env, name, command, host, pid, pid_start,
                                                      status, exit_code, signal, fencing_token, duration_s,
                                                      started_at, text, tail):
    path = lockrun_env / "state" / "ledger.db"
    run_id = uuid.uuid4().hex
    ledger = Ledger(path).open()
    try:
        ledger.start(RunRecord(run_id=run_id, name=name, command=command, backend=text or "local",
                               started_at=started_at, host=host, pid=pid, pid_start=pid_start,
                               boot_id=boot_id(), once_key=text, fencing_token=fencing_token))
        if status != "running":
            ledger.finish(run_id, status=status, ended_at=started_at, duration_s=duration_s, exit_code=exit_code,
                          signal=signal, error=text, note=text, output_tail=tail)
    finally:
        ledger.close()
    code, out, err = cli(capsys, "history", "--json", "--limit", "1000000")
    assert_clean(code, err, (0,))
    rows = json.loads(out)
    assert run_id in {row["run_id"] for row in rows}
    for row in rows:
        assert isinstance(row["command"], list) and all(isinstance(arg, str) for arg in row["command"])
        json.dumps(row, allow_nan=False)  # strict JSON: no NaN or Infinity
    for args in (["history"], ["history", "--status", "running"], ["history", "--status", "abandoned"],
                 ["show", run_id], ["show", run_id[:8], "--json"], ["metrics"]):
        code, out, err = cli(capsys, *args)
        assert_clean(code, err, (0,))
