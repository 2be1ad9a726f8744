"""Whether a holder is alive, judged only by what the kernel or the Redis server vouches for.

README "What lockrun guarantees" ("Is the holder alive?"): a pid is evidence only within the
reader's machine, boot and PID namespace; a host name is a label; a Redis heartbeat is the
server's TIME, and its age is measured against the server's TIME. Each case here once let
`unlock --yes` (without --force) clear a live holder, or `status`/`history` call it dead:

- holders in another PID namespace (``unshare --pid --fork --mount-proc``), both directions,
  both backends;
- two "machines" with one host name: another boot id (and machine id) bind-mounted over
  /proc/sys/kernel/random/boot_id (and /etc/machine-id) in a mount namespace;
- clocks that disagree (``faketime``).

Every holder is a real lockrun process; we run as root (CI too).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from lockrun.backends.redis.lua_parts import HEARTBEAT_LUA
from lockrun.system import host
from tests.conftest import history, lockrun_argv, run_lockrun, wait_until

#: A process in a PID namespace of its own, with its own /proc (a container on the host network).
PID_NAMESPACE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
ISO = "%Y-%m-%dT%H:%M:%S.%fZ"


def skewed(offset: str, holder: bool = False) -> list[str]:
    """A prefix that runs a command on a clock ``offset`` away ("+50s"): a host whose clock is wrong.
    A holder's keeps its monotonic clock: libfaketime shifts that one too, and a shifted monotonic
    clock disagrees with the kernel's timers (the keeper's waits), which no real host sees."""
    return ["faketime", *(["--exclude-monotonic"] if holder else []), "-f", offset]


@pytest.fixture(autouse=True)
def _root_and_tools():
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("faketime"):
        pytest.fail("these tests need root, unshare(1) (util-linux) and faketime(1) (Debian's faketime); "
                    ".ci/run installs them")
    if not host.machine_id():
        pytest.fail("these tests need /etc/machine-id (.ci/run writes one where there is none)")


def run(env: dict, *argv: str, prefix: tuple[str, ...] | list[str] = ()) -> subprocess.CompletedProcess:
    """lockrun ``argv``, under ``prefix`` (a namespace, faketime)."""
    return subprocess.run([*prefix, *lockrun_argv(*argv)], env=env, capture_output=True, text=True, timeout=60)


def status(env: dict, name: str, prefix: tuple[str, ...] | list[str] = ()) -> dict:
    result = run(env, "status", "--json", name, prefix=prefix)
    assert result.returncode == 0, result.stderr
    (lock,) = json.loads(result.stdout)["locks"]
    return lock


def history_of(env: dict, name: str, prefix: tuple[str, ...] | list[str] = ()) -> list[dict]:
    result = run(env, "history", "--json", name, prefix=prefix)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


class Holder:
    """A real lockrun holding ``name`` (its command touches a flag, then sleeps), under ``prefix``."""

    def __init__(self, env: dict, tmp_path: Path, name: str, *, ttl: str = "60",
                 prefix: tuple[str, ...] | list[str] = ()) -> None:
        flag = tmp_path / f"{name}-{uuid.uuid4().hex[:6]}.started"
        argv = lockrun_argv("-n", name, "--ttl", ttl, "--", "sh", "-c", f"touch {flag}; exec sleep 300")
        self.proc = subprocess.Popen([*prefix, *argv], env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        wait_until(lambda: flag.exists() or self.proc.poll() is not None, what=f"the holder of {name}")
        assert self.proc.poll() is None, self.proc.communicate()[1]

    def lockrun_pid(self) -> int:
        """lockrun's pid as we see it: unshare's child under a PID namespace, else the process itself."""
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                children = f.read().split()
        except OSError:
            children = []
        return int(children[0]) if children and self.proc.args[0] == "unshare" else self.proc.pid

    def kill(self) -> None:
        """SIGKILL the holder (under unshare --kill-child, its lockrun dies with unshare, and with
        it, as the namespace's PID 1, every process of the namespace)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        if self.proc.stderr:
            self.proc.stderr.close()


@pytest.fixture
def holders():
    started: list[Holder] = []
    yield started
    for holder in started:
        holder.stop()


def hold(holders: list[Holder], *args, **kwargs) -> Holder:
    holders.append(Holder(*args, **kwargs))
    return holders[-1]


def refuses(result: subprocess.CompletedProcess, name: str) -> bool:
    return (result.returncode == 1 and "looks alive" in result.stderr and f"unlock --force {name}" in result.stderr
            and "cleared" not in result.stdout)


# --- PID namespaces ------------------------------------------------------------------------------------


@pytest.mark.parametrize("holder_in_namespace", [True, False], ids=["holder-in-namespace", "reader-in-namespace"])
def test_redis_holder_in_another_pid_namespace_is_alive(env, tmp_path, holders, redis_server, holder_in_namespace):
    holder_prefix, reader_prefix = (PID_NAMESPACE, []) if holder_in_namespace else ([], PID_NAMESPACE)
    holder = hold(holders, env, tmp_path, "ns", prefix=holder_prefix)
    info = redis_server.client().hgetall("lockrun:{ns}:info")
    assert info[b"machine_id"].decode() == host.machine_id()
    assert int(info[b"pid_ns"]) != host.pid_ns() if holder_in_namespace else int(info[b"pid_ns"]) == host.pid_ns()
    lock = status(env, "ns", reader_prefix)
    assert lock["state"] == "held", lock
    assert lock["pid"] == (1 if holder_in_namespace else holder.proc.pid)  # as recorded: its own namespace's pid
    assert refuses(run(env, "unlock", "ns", "--yes", prefix=reader_prefix), "ns")
    assert redis_server.client().exists("lockrun:{ns}:lock") == 1
    (row,) = history_of(env, "ns", reader_prefix)
    assert row["status"] == "running"


@pytest.mark.parametrize("holder_in_namespace", [True, False], ids=["holder-in-namespace", "reader-in-namespace"])
def test_local_holder_in_another_pid_namespace_is_shown_and_alive(local_env, tmp_path, holders, holder_in_namespace):
    holder_prefix, reader_prefix = (PID_NAMESPACE, []) if holder_in_namespace else ([], PID_NAMESPACE)
    holder = hold(holders, local_env, tmp_path, "lns", prefix=holder_prefix)
    lock = status(local_env, "lns", reader_prefix)
    # The holder as its description says (not "-"): the kernel lock proves it is alive.
    assert (lock["state"], lock["host"], lock["run_id"] is not None) == ("held", host.hostname(), True), lock
    assert lock["pid"] == (1 if holder_in_namespace else holder.proc.pid)
    table = run(local_env, "status", "lns", prefix=reader_prefix)
    assert f"{host.hostname()}:{lock['pid']}" in table.stdout
    assert "lns: " in table.stdout and "another PID namespace" in table.stdout
    if holder_in_namespace:  # from the parent namespace the kernel names it: where it is, here
        assert f"here it is pid {holder.lockrun_pid()}" in table.stdout
    else:
        assert "cannot see into" in table.stdout
    refused = run(local_env, "unlock", "lns", "--yes", prefix=reader_prefix)
    assert refused.returncode == 1 and "another PID namespace" in refused.stdout and "cleared" not in refused.stdout
    (row,) = history_of(local_env, "lns", reader_prefix)
    assert row["status"] == "running"  # not abandoned: its pid means nothing in the reader's namespace
    holder.stop()
    assert status(local_env, "lns", reader_prefix)["state"] == "free"


def test_a_dead_holder_in_a_pid_namespace_is_never_cleared_without_force(env, tmp_path, holders, redis_server):
    """Its pid proves nothing from here: it stays `held` until its heartbeat is stale by the
    server's clock, whatever this host's clock says; even then a stale heartbeat proves nothing
    (a holder cut off from Redis looks the same), so unlock still needs --force, and the lease
    expires by itself."""
    holder = hold(holders, env, tmp_path, "gone", ttl="15", prefix=PID_NAMESPACE)
    holder.kill()
    client = redis_server.client()
    assert status(env, "gone")["state"] == "held"
    assert refuses(run(env, "unlock", "gone", "--yes"), "gone")
    assert refuses(run(env, "unlock", "gone", "--yes", prefix=skewed("+50s")), "gone")
    assert client.exists("lockrun:{gone}:lock") == 1
    # Missed two renewals (every 5 s) and the margin (1.5 s) by the server's own clock.
    beat = datetime.strptime(client.hget("lockrun:{gone}:info", "heartbeat_at").decode(), ISO)

    def silent_for() -> float:
        seconds, micros = client.time()
        return (datetime.fromtimestamp(seconds + micros / 1e6, timezone.utc).replace(tzinfo=None) - beat)\
            .total_seconds()

    wait_until(lambda: silent_for() > 11.7, timeout=30, interval=0.05, what="two missed renewals")
    assert status(env, "gone", skewed("-50s"))["state"] == "zombie"  # this clock is far behind
    kept = run(env, "unlock", "gone", "--yes", prefix=skewed("-50s"))
    assert kept.returncode == 1 and kept.stderr.count("\n") == 1, (kept.stdout, kept.stderr)
    assert "zombie: its last heartbeat was" in kept.stdout and "by the server's clock" in kept.stdout
    assert "does not prove it dead" in kept.stderr and "expires by itself in" in kept.stderr
    assert "unlock --force gone" in kept.stderr
    wait_until(lambda: client.exists("lockrun:{gone}:lock") == 0, timeout=30, what="the lease to expire by itself")
    # The ledger's word is not a clearing: from the initial namespace, which sees every process, no
    # process is that run's lockrun any more; from any other, nothing can be told.
    expected = "abandoned" if host.pid_ns() == host.INIT_PID_NS else "running"
    assert [row["status"] for row in history_of(env, "gone") if row["status"] != "unlocked"] == [expected]


def test_a_sigkilled_holder_of_this_namespace_is_still_a_zombie_at_once(env, tmp_path, holders):
    """Within one machine, boot and PID namespace the pid is evidence, as before (a long TTL)."""
    holder = hold(holders, env, tmp_path, "here", ttl="600")
    holder.kill()
    lock = status(env, "here")
    assert lock["state"] == "zombie" and lock["heartbeat_age_s"] < 60
    cleared = run(env, "unlock", "here", "--yes")
    assert cleared.returncode == 0 and "no longer runs (this machine, boot and PID namespace)" in cleared.stdout


def test_a_holder_in_another_time_namespace_is_alive(env, tmp_path, holders):
    """Start times in /proc are shifted by a time namespace's boot-time offset: one recorded there
    differs from ours for the same process, which is no proof that the pid was reused."""
    hold(holders, env, tmp_path, "tns", prefix=["unshare", "--time", "--boottime", "100000", "--fork", "--kill-child"])
    assert status(env, "tns")["state"] == "held"
    assert refuses(run(env, "unlock", "tns", "--yes"), "tns")
    assert history_of(env, "tns")[0]["status"] == "running"


# --- one host name, two machines -------------------------------------------------------------------------


def other_machine(tmp_path: Path, *, same_machine_id: bool = False) -> list[str]:
    """A prefix that runs a command as another machine with this host's name: another boot id (and,
    unless ``same_machine_id``, another machine id) bind-mounted in a mount namespace of its own."""
    boot = tmp_path / f"boot-{uuid.uuid4().hex[:6]}"
    boot.write_text(f"{uuid.uuid4()}\n")
    machine = tmp_path / f"machine-{uuid.uuid4().hex[:6]}"
    machine.write_text((host.machine_id() if same_machine_id else uuid.uuid4().hex) + "\n")
    machine_file = next(path for path in host.MACHINE_ID_FILES if os.path.exists(path))
    script = ('mount --bind "$1" /proc/sys/kernel/random/boot_id && mount --bind "$2" "$3" && hostname "$4"'
              ' && shift 4 && exec "$@"')
    return ["unshare", "--mount", "--uts", "sh", "-c", script, "sh", str(boot), str(machine), machine_file,
            host.hostname()]


@pytest.mark.parametrize("holder_elsewhere", [True, False], ids=["holder-elsewhere", "reader-elsewhere"])
def test_another_machine_with_this_host_name_is_not_an_earlier_boot(env, tmp_path, holders, redis_server,
                                                                    holder_elsewhere):
    elsewhere = other_machine(tmp_path)
    holder_prefix, reader_prefix = (elsewhere, []) if holder_elsewhere else ([], elsewhere)
    hold(holders, env, tmp_path, "twin", prefix=holder_prefix)
    info = redis_server.client().hgetall("lockrun:{twin}:info")
    assert info[b"host"].decode() == host.hostname()
    assert (info[b"boot_id"].decode() != host.boot_id()) == holder_elsewhere
    lock = status(env, "twin", reader_prefix)
    assert lock["state"] == "held" and lock["host"] == host.hostname(), lock
    refused = run(env, "unlock", "twin", "--yes", prefix=reader_prefix)
    assert refuses(refused, "twin") and "earlier boot" not in refused.stdout + refused.stderr
    assert history_of(env, "twin", reader_prefix)[0]["status"] == "running"


def test_a_live_clone_that_copied_the_machine_id_is_not_an_earlier_boot(env, tmp_path, holders):
    """Another boot id under this machine id reads as an earlier boot only when its heartbeat, by the
    server's clock, came before this machine booted: a clone that renews is alive."""
    hold(holders, env, tmp_path, "clone", prefix=other_machine(tmp_path, same_machine_id=True))
    assert status(env, "clone")["state"] == "held"
    assert refuses(run(env, "unlock", "clone", "--yes"), "clone")


def write_holder(client, name: str, **fields: str) -> None:
    """A holder record as another lockrun would have written it, its lease a minute long."""
    seconds, micros = client.time()
    now = datetime.fromtimestamp(seconds + micros / 1e6, timezone.utc)
    record = {"token": f"tok-{name}", "run_id": "ab" * 16, "host": host.hostname(), "pid": "4242",
              "pid_start": "1", "command": '["job"]', "started_at": now.strftime(ISO),
              "heartbeat_at": now.strftime(ISO), "ttl_ms": str(365 * 86400 * 1000), **fields}
    client.set(f"lockrun:{{{name}}}:lock", record["token"], px=60000)
    client.hset(f"lockrun:{{{name}}}:info", mapping=record)


def test_an_earlier_boot_needs_this_machine_id_and_a_heartbeat_from_before_this_boot(env, redis_server):
    client = redis_server.client()
    seconds, _ = client.time()
    silent = host.uptime_s() + 120
    before_boot = datetime.fromtimestamp(seconds - silent, timezone.utc).strftime(ISO)
    # A TTL for which that silence missed a renewal, not two (so the heartbeat rule alone would wait).
    past = {"boot_id": str(uuid.uuid4()), "heartbeat_at": before_boot, "ttl_ms": str(int(2 * silent * 1000))}
    # This machine, another boot, silent since before this boot.
    write_holder(client, "past", **past, machine_id=host.machine_id(), pid_ns=str(host.pid_ns()))
    # The same, from another machine, and from a machine that did not say which.
    write_holder(client, "far", **past, machine_id=uuid.uuid4().hex)
    write_holder(client, "unsaid", **past, pid_ns=str(host.pid_ns()))
    # This machine, another boot, but it renewed a moment ago: a clone, alive.
    write_holder(client, "fresh", **{**past, "heartbeat_at": datetime.now(timezone.utc).strftime(ISO)},
                 machine_id=host.machine_id(), pid_ns=str(host.pid_ns()))
    assert status(env, "past")["state"] == "zombie"
    assert [status(env, name)["state"] for name in ("far", "unsaid", "fresh")] == ["held"] * 3
    cleared = run(env, "unlock", "past", "--yes")
    assert cleared.returncode == 0 and "earlier boot" in cleared.stdout
    for name in ("far", "unsaid", "fresh"):
        refused = run(env, "unlock", name, "--yes")
        assert refuses(refused, name) and "earlier boot" not in refused.stdout


def test_a_pid_of_this_host_name_is_no_evidence_from_another_namespace_or_machine(env, redis_server):
    """Records naming this host, this boot and a pid that is dead here: dead only when they also
    name this machine and this PID namespace (one that names neither, written where /proc and
    machine-id(5) could not be read, is alive: its pid may be another namespace's)."""
    client = redis_server.client()
    dead = subprocess.Popen(["true"])
    dead.wait()
    here = {"boot_id": host.boot_id(), "pid": str(dead.pid), "pid_start": "0"}
    write_holder(client, "same", **here, machine_id=host.machine_id(), pid_ns=str(host.pid_ns()))
    write_holder(client, "other-ns", **here, machine_id=host.machine_id(), pid_ns=str(host.pid_ns() + 1))
    write_holder(client, "other-machine", **here, machine_id=uuid.uuid4().hex, pid_ns=str(host.pid_ns()))
    write_holder(client, "unsaid", **here, machine_id="", pid_ns="")
    assert [status(env, name)["state"] for name in ("same", "other-ns", "other-machine", "unsaid")] == [
        "zombie", "held", "held", "held"]


@pytest.mark.parametrize("field,value", [
    ("pid_ns", "pid:[4026531836]"), ("pid_ns", "-1"), ("pid_ns", "99999999999"), ("pid_ns", "[1]"),
    ("machine_id", "uninitialized"), ("machine_id", "X" * 32), ("machine_id", "0" * 31), ("machine_id", "\x1b[2J"),
])
def test_garbage_in_the_identity_fields_is_malformed_never_dead(env, redis_server, field, value):
    client = redis_server.client()
    dead = subprocess.Popen(["true"])
    dead.wait()
    fields = {"boot_id": host.boot_id(), "pid": str(dead.pid), "machine_id": host.machine_id(),
              "pid_ns": str(host.pid_ns()), field: value}
    write_holder(client, "bad", **fields)
    lock = status(env, "bad")
    assert lock["state"] == "malformed" and field in lock["problem"], lock
    refused = run(env, "unlock", "bad", "--yes")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr and "nothing shows" in refused.stderr
    assert client.exists("lockrun:{bad}:lock") == 1


# --- clocks --------------------------------------------------------------------------------------------------


def test_heartbeats_are_the_servers_time(env, tmp_path, holders, redis_server):
    """A holder whose clock is 100 s behind (and one 100 s ahead) stamps the server's TIME, at the
    acquire and at every renewal; a reader with another clock still measures the age truly."""
    client = redis_server.client()
    for name, skew in (("behind", "-100s"), ("ahead", "+100s")):
        hold(holders, env, tmp_path, name, ttl="3", prefix=skewed(skew, holder=True))
        first = client.hget(f"lockrun:{{{name}}}:info", "heartbeat_at")
        wait_until(lambda name=name, first=first: client.hget(f"lockrun:{{{name}}}:info", "heartbeat_at") != first,
                   what="a renewal")
        seconds, micros = client.time()
        server_now = datetime.fromtimestamp(seconds + micros / 1e6, timezone.utc).replace(tzinfo=None)
        beat = datetime.strptime(client.hget(f"lockrun:{{{name}}}:info", "heartbeat_at").decode(), ISO)
        assert abs((server_now - beat).total_seconds()) < 3
        for reader in ([], skewed("+50s"), skewed("-50s")):
            lock = status(env, name, reader)
            assert lock["state"] == "held" and 0 <= lock["heartbeat_age_s"] < 3, (reader, lock)


def test_unlock_on_a_clock_50s_ahead_refuses_a_fresh_holder(env, tmp_path, holders, redis_server):
    hold(holders, env, tmp_path, "skew", ttl="60")
    refused = run(env, "unlock", "skew", "--yes", prefix=skewed("+50s"))
    assert refuses(refused, "skew"), (refused.stdout, refused.stderr)
    assert redis_server.client().exists("lockrun:{skew}:lock") == 1
    assert status(env, "skew", skewed("+50s"))["state"] == "held"


def test_a_stale_heartbeat_is_a_zombie_by_the_servers_clock_whatever_ours_says(env, redis_server):
    """A heartbeat 50 s old by the server's clock (TTL 60) is a zombie for a reader whose clock is
    right, 50 s ahead or 50 s behind; a fresh one is alive for all three."""
    client = redis_server.client()
    seconds, micros = client.time()
    server_now = datetime.fromtimestamp(seconds + micros / 1e6, timezone.utc)
    old = (server_now - timedelta(seconds=50)).strftime(ISO)
    write_holder(client, "stale", heartbeat_at=old, ttl_ms="60000", host="elsewhere", pid="1")
    for reader in ([], skewed("+50s"), skewed("-50s")):
        lock = status(env, "stale", reader)
        assert lock["state"] == "zombie" and 50 <= lock["heartbeat_age_s"] < 60, (reader, lock)
    kept = run(env, "unlock", "stale", "--yes", prefix=skewed("-50s"))
    assert kept.returncode == 1 and "does not prove it dead" in kept.stderr, (kept.stdout, kept.stderr)
    assert client.exists("lockrun:{stale}:lock") == 1
    cleared = run(env, "unlock", "stale", "--yes", "--force", prefix=skewed("-50s"))
    assert cleared.returncode == 0 and "by the server's clock" in cleared.stdout
    assert client.exists("lockrun:{stale}:lock") == 0


def test_the_heartbeat_script_writes_iso_8601_utc_like_python(redis_server):
    """HEARTBEAT_LUA's calendar (Lua has no os.date in Redis) against Python's, over leap years,
    centuries, month ends and the far future."""
    client = redis_server.client()
    script = HEARTBEAT_LUA + "return iso_utc(tonumber(ARGV[1]), tonumber(ARGV[2]))"
    moments = [0, 59, 86399, 86400, 951782399, 951782400, 951868800, 1709164800, 1709251199, 1735689599,
               4102444800, 4107542399, 253402300799]
    moments += [step * 39_999_989 for step in range(0, 6_300)]  # 1970 to 9955, a day every ~463 days
    # Every day of 2024 (a leap year) and of 2100 (a century year that is not one).
    moments += [day * 86400 + 43_200 + offset for offset in (1_704_067_200, 4_102_444_800) for day in range(366)]
    for moment in moments:
        micros = moment % 1000000
        expected = datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{micros:06d}Z"
        assert client.eval(script, 0, moment, micros).decode() == expected


def test_history_of_a_live_run_is_running_from_every_namespace(env, tmp_path, holders):
    """The ledger row records its PID namespace and machine id; readers of other namespaces do
    not take the pid for theirs."""
    hold(holders, env, tmp_path, "row", prefix=PID_NAMESPACE)
    for reader in ([], PID_NAMESPACE):
        (row,) = history(env, "row") if not reader else history_of(env, "row", reader)
        assert row["status"] == "running"
    db = sqlite3.connect(Path(env["LOCKRUN_STATE_DIR"]) / "ledger.db")
    pid, namespace, machine = db.execute("SELECT pid, pid_ns, machine_id FROM runs WHERE name = 'row'").fetchone()
    assert (pid, machine) == (1, host.machine_id()) and namespace not in (None, host.pid_ns())
    assert "running" in run_lockrun(env, "history", "row").stdout


@pytest.mark.parametrize("column,value", [
    ("pid_ns", "x"), ("pid_ns", -1), ("pid_ns", 1 << 40), ("pid_ns", 1.5), ("pid_ns", b"\xff"), ("pid_ns", "pid:[1]"),
    ("machine_id", 5), ("machine_id", "X" * 32), ("machine_id", b"\x00" * 32), ("machine_id", "uninitialized"),
])
def test_a_ledger_row_with_garbage_identity_stays_running(local_env, column, value):
    """A running row whose pid is dead here, but whose namespace or machine is unreadable: never
    called abandoned, and never a traceback."""
    assert run_lockrun(local_env, "-n", "g", "--", "true").returncode == 0
    dead = subprocess.Popen(["true"])
    dead.wait()
    db = sqlite3.connect(Path(local_env["LOCKRUN_STATE_DIR"]) / "ledger.db")
    db.execute("UPDATE runs SET status = 'running', ended_at = NULL, pid = ?", (dead.pid,))
    db.commit()
    assert history_of(local_env, "g")[0]["status"] == "abandoned"  # as recorded: its process is gone
    db.execute(f"UPDATE runs SET {column} = ?", (value,))
    db.commit()
    db.close()
    (row,) = history_of(local_env, "g")
    assert row["status"] == "running"
    for args in (("history", "g"), ("timeline", "g"), ("history", "--status", "abandoned")):
        result = run_lockrun(local_env, *args)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
