"""One zone per name (README "One zone per name"): --once periods computed in one named zone, recorded
with the name by the acquire, and a run in another zone refused like a --slots mismatch."""

from __future__ import annotations

import calendar
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import as_host, history, lockrun_argv, run_lockrun, spawn_lockrun, wait_until

LIBFAKETIME = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                                "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                                "/usr/lib/faketime/libfaketime.so.1") if os.path.exists(p)), None)
#: The issue's moment: 20:00 UTC on 1 December is already 2 December in Jakarta (UTC+7).
MOMENT = calendar.timegm((2026, 12, 1, 20, 0, 0))


def at_moment(env: dict, when: float = MOMENT) -> dict:
    """``env`` with the wall clock moved to ``when`` (libfaketime, Debian's faketime package)."""
    if LIBFAKETIME is None:
        pytest.fail("libfaketime is missing (apt-get install faketime); .ci/run installs it")
    return {**env, "LD_PRELOAD": LIBFAKETIME, "FAKETIME": f"{when - time.time():+.0f}",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def on_host(hosts, hostname: str, zone_env: dict, *args: str, moment: float | None = MOMENT):
    env = {**hosts.env(hostname), **zone_env}
    if moment is not None:
        env = at_moment(env, moment)
    return subprocess.run(as_host(hostname, lockrun_argv(*args)), env=env, capture_output=True, text=True,
                          timeout=60)


def test_the_issues_two_zones_at_one_moment_run_the_day_once(hosts, redis_server, tmp_path):
    count = tmp_path / "count"
    job = ["-n", "payroll", "--once-per", "day", "--", "sh", "-c", f"echo x >> {count}"]
    utc = on_host(hosts, "app-utc", {"TZ": "UTC"}, *job)
    jakarta = on_host(hosts, "app-jkt", {"TZ": "Asia/Jakarta"}, *job)
    assert (utc.returncode, utc.stderr) == (0, "")
    assert jakarta.returncode == 2 and jakarta.stderr.count("\n") == 1, jakarta.stderr
    assert "in UTC (recorded by its earlier runs)" in jakarta.stderr
    assert "this run in Asia/Jakarta (the host's local zone, TZ=Asia/Jakarta)" in jakarta.stderr
    assert "--tz UTC" in jakarta.stderr
    assert count.read_text() == "x\n"
    client = redis_server.client()
    assert sorted(client.keys("lockrun:{payroll}:done:*")) == [b"lockrun:{payroll}:done:2026-12-01"]
    assert client.get("lockrun:{payroll}:once_tz") == b"UTC"
    (refused,) = hosts.json("app-jkt", "history", "payroll")
    assert refused["status"] == "error" and refused["exit_status"] == 2 and "Asia/Jakarta" in refused["error"]
    # The same hosts, both pinned to one zone: one key, the second run a duplicate.
    pinned = ["-n", "payroll-pinned", "--tz", "Asia/Jakarta", *job[2:]]
    assert on_host(hosts, "app-utc", {"TZ": "UTC"}, *pinned).returncode == 0
    again = on_host(hosts, "app-jkt", {"TZ": "Asia/Jakarta"}, *pinned)
    assert (again.returncode, again.stderr) == (0, "")
    assert hosts.json("app-jkt", "history", "payroll-pinned")[0]["status"] == "duplicate"
    assert client.keys("lockrun:{payroll-pinned}:done:*") == [b"lockrun:{payroll-pinned}:done:2026-12-02"]
    assert count.read_text() == "x\nx\n"


def test_two_zones_started_together_run_once(hosts, redis_server, tmp_path):
    """At the same instant, whichever takes the lock first records its zone; the other is refused
    (or, holding, busy: it never computes another day's key and runs)."""
    log = tmp_path / "ran"
    job = ["-n", "nightly", "--once-per", "day", "--wait", "5", "--", "sh", "-c", f"echo $$ >> {log}; sleep 1"]
    procs = []
    for hostname, tz in (("h-utc", "UTC"), ("h-jkt", "Asia/Jakarta")):
        env = at_moment({**hosts.env(hostname), "TZ": tz})
        procs.append(subprocess.Popen(as_host(hostname, lockrun_argv(*job)), env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    ended = [proc.communicate(timeout=60) for proc in procs]
    codes = sorted(proc.returncode for proc in procs)
    assert codes == [0, 2], ended
    assert len(log.read_text().splitlines()) == 1
    assert len(redis_server.client().keys("lockrun:{nightly}:done:*")) == 1


def test_the_local_backend_keeps_one_zone_per_name_too(local_env, tmp_path):
    count = tmp_path / "count"
    job = ["-n", "local-pay", "--once-per", "day", "--", "sh", "-c", f"echo x >> {count}"]
    assert run_lockrun(at_moment({**local_env, "TZ": "UTC"}), *job).returncode == 0
    refused = run_lockrun(at_moment({**local_env, "TZ": "Asia/Jakarta"}), *job)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "in UTC (recorded by its earlier runs)" in refused.stderr and "Asia/Jakarta" in refused.stderr
    slotted = run_lockrun(at_moment({**local_env, "TZ": "Asia/Jakarta"}), *job[:4], "--slots", "2", *job[4:])
    # Several slots never share a once key (two holders could do one period's work at once):
    # that refusal comes first, before any zone is looked at.
    assert slotted.returncode == 2 and "--slots 2 cannot be combined with --once" in slotted.stderr
    assert count.read_text() == "x\n"
    once_dir = Path(local_env["LOCKRUN_STATE_DIR"]) / "once" / "local-pay"
    assert sorted(p.name for p in once_dir.iterdir()) == ["2026-12-01", "~zone"]
    zone_file = once_dir / "~zone"
    assert zone_file.read_text().split()[1] == "UTC" and zone_file.stat().st_mode & 0o077 == 0
    # A zone file that is a link is refused, not followed (exit 69, one line).
    zone_file.unlink()
    zone_file.symlink_to(tmp_path / "elsewhere")
    linked = run_lockrun({**local_env, "TZ": "UTC"}, *job)
    assert linked.returncode == 69 and "symbolic link" in linked.stderr and linked.stderr.count("\n") == 1
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("backend", ["redis", "local"])
def test_only_time_derived_keys_involve_the_zone(backend, env, local_env):
    environment = env if backend == "redis" else local_env
    utc, jakarta = {**environment, "TZ": "UTC"}, {**environment, "TZ": "Asia/Jakarta"}
    assert run_lockrun(utc, "-n", "mixed", "--once", "r-%Y", "--", "true").returncode == 0
    assert run_lockrun(jakarta, "-n", "mixed", "--once", "r-%Y", "--", "true").returncode == 2
    # A key without a conversion is the same in every zone: no zone is checked.
    assert run_lockrun(jakarta, "-n", "mixed", "--once", "plain", "--", "true").returncode == 0
    assert run_lockrun(jakarta, "-n", "mixed", "--", "true").returncode == 0
    assert run_lockrun(jakarta, "-n", "mixed", "--tz", "Europe/Berlin", "--", "true").returncode == 0


def test_names_of_one_zone_agree(env, redis_server):
    """Aliases are made canonical, so hosts that name one zone differently agree."""
    for first, second in ((["--tz", "UTC"], {"TZ": "Etc/UTC"}), (["--tz", "Zulu"], {"TZ": ""}),
                          (["--tz", "US/Eastern"], {"LOCKRUN_TZ": "America/New_York"})):
        name = f"alias-{first[1].replace('/', '-')}"
        assert run_lockrun(env, "-n", name, *first, "--once-per", "hour", "--", "true").returncode == 0
        second_run = run_lockrun({**env, **second}, "-n", name, "--once-per", "hour", "--", "true")
        assert second_run.returncode == 0, second_run.stderr
        assert history(env, name)[0]["status"] in ("duplicate", "succeeded")  # an hour may have turned
    assert redis_server.client().get("lockrun:{alias-US-Eastern}:once_tz") == b"America/New_York"


def test_the_zone_outlives_the_done_keys_it_guards(env, redis_server):
    client = redis_server.client()
    assert run_lockrun(env, "-n", "kept", "--once-per", "month", "--remember", "400d", "--", "true").returncode == 0
    (done,) = client.keys("lockrun:{kept}:done:*")
    assert client.pttl("lockrun:{kept}:once_tz") >= client.pttl(done) > 399 * 86400 * 1000
    # A later run that remembers less never shortens the zone's life.
    assert run_lockrun(env, "-n", "kept", "--once-per", "day", "--remember", "1d", "--", "true").returncode == 0
    assert client.pttl("lockrun:{kept}:once_tz") >= client.pttl(done)


def test_a_long_run_keeps_the_zone_as_long_as_the_key_it_marks(env, redis_server, tmp_path):
    """The done key is written at the release; the release pushes the zone's expiry past it."""
    client = redis_server.client()
    started = tmp_path / "started"
    proc = spawn_lockrun(env, "-n", "slow", "--ttl", "2", "--once-per", "day", "--remember", "3s", "--", "sh", "-c",
                         f"touch {started}; sleep 4")
    wait_until(started.exists, what="the command")
    assert client.pttl("lockrun:{slow}:once_tz") <= 5000  # remember + ttl, set by the acquire
    assert proc.wait(timeout=30) == 0
    (done,) = client.keys("lockrun:{slow}:done:*")
    assert client.pttl("lockrun:{slow}:once_tz") >= client.pttl(done) > 0


@pytest.mark.parametrize("args,extra_env,code,words", [
    (["--tz", "Mars/Olympus"], {}, 2, "unknown time zone 'Mars/Olympus'"),
    (["--tz", ""], {}, 2, "unknown time zone ''"),
    (["--tz", "/etc/passwd"], {}, 2, "unknown time zone"),
    (["--tz", "../../etc/passwd"], {}, 2, "unknown time zone"),
    (["--tz", "localtime"], {}, 2, "unknown time zone"),
    (["--tz", "posix/localtime"], {}, 2, "unknown time zone"),
    (["--tz", "x" * 5000], {}, 2, "…' (5000 characters)"),
    ([], {"LOCKRUN_TZ": "Nowhere"}, 2, "LOCKRUN_TZ"),
    (["--once-per", "day"], {"TZ": "JST-9"}, 2, "cannot name this host's local time zone (TZ='JST-9'"),
    (["--once-per", "day"], {"TZ": "/tmp/not-a-zone"}, 2, "cannot name this host's local time zone"),
])
def test_a_bad_zone_is_one_line(env, args, extra_env, code, words):
    result = run_lockrun({**env, **extra_env}, "-n", "badz", *args, "--", "true")
    assert result.returncode == code and result.stderr.count("\n") == 1 and words in result.stderr, result.stderr
    assert len(result.stderr) < 400


def test_a_posix_tz_is_fine_without_a_time_derived_key(env):
    assert run_lockrun({**env, "TZ": "JST-9"}, "-n", "posix", "--", "true").returncode == 0
    assert run_lockrun({**env, "TZ": "UTC0"}, "-n", "posix", "--once-per", "day", "--", "true").returncode == 0


@pytest.mark.parametrize("value", ['"Mars/Olympus"', "7", '""', '"localtime"'])
def test_a_bad_timezone_in_the_config_file_is_78(env, tmp_path, value):
    config = tmp_path / "tz.toml"
    config.write_text(f"timezone = {value}\n")
    result = run_lockrun({**env, "LOCKRUN_CONFIG": str(config)}, "-n", "c", "--", "true")
    assert result.returncode == 78 and result.stderr.count("\n") == 1 and "line 1" in result.stderr


def test_the_config_files_timezone_and_its_precedence(env, redis_server, tmp_path):
    config = tmp_path / "tz.toml"
    config.write_text('timezone = "Asia/Jakarta"\n')
    configured = {**env, "LOCKRUN_CONFIG": str(config), "TZ": "UTC"}
    assert run_lockrun(configured, "-n", "cfg", "--once-per", "day", "--", "true").returncode == 0
    assert redis_server.client().get("lockrun:{cfg}:once_tz") == b"Asia/Jakarta"
    refused = run_lockrun(configured, "-n", "cfg", "--tz", "UTC", "--once-per", "day", "--", "true")
    assert refused.returncode == 2 and "this run in UTC (--tz)" in refused.stderr
    by_env = run_lockrun({**configured, "LOCKRUN_TZ": "Europe/Berlin"}, "-n", "cfg", "--once-per", "day", "--", "true")
    assert by_env.returncode == 2 and "this run in Europe/Berlin (LOCKRUN_TZ)" in by_env.stderr


def test_a_zone_record_written_by_someone_else(env, redis_server):
    client = redis_server.client()
    client.hset("lockrun:{odd}:once_tz", "x", "1")
    wrong_type = run_lockrun(env, "-n", "odd", "--once-per", "day", "--", "true")
    assert wrong_type.returncode == 69 and wrong_type.stderr.count("\n") == 1
    assert "lockrun:{odd}:once_tz is a hash" in wrong_type.stderr and "DEL" in wrong_type.stderr
    client.set("lockrun:{odd2}:once_tz", "\x1b[31mevil\n" + "z" * 500)
    garbage = run_lockrun(env, "-n", "odd2", "--once-per", "day", "--", "true")
    # No zone lockrun could have recorded: data it did not write, as the hash is (README "One zone per name").
    assert garbage.returncode == 69 and garbage.stderr.count("\n") == 1 and "\x1b" not in garbage.stderr
    assert len(garbage.stderr) < 600


# --- naming the local zone (in-process: the rule, on files made here) ----------------------------


@pytest.fixture
def zones_here(monkeypatch, tmp_path):
    from lockrun.core import zones

    monkeypatch.delenv("TZ", raising=False)
    monkeypatch.setattr(zones, "LOCALTIME", tmp_path / "localtime")
    monkeypatch.setattr(zones, "DEBIAN_TIMEZONE", tmp_path / "timezone")
    return zones


def test_the_local_zone_from_a_link(zones_here, tmp_path):
    (tmp_path / "localtime").symlink_to("/usr/share/zoneinfo/Asia/Jakarta")
    assert zones_here.local_zone().name == "Asia/Jakarta"


def test_the_local_zone_from_a_copy(zones_here, tmp_path):
    shutil.copy("/usr/share/zoneinfo/Asia/Jakarta", tmp_path / "localtime")
    assert zones_here.local_zone().name == "Asia/Jakarta"  # found by its contents
    (tmp_path / "timezone").write_text("Asia/Jakarta\n")
    assert zones_here.local_zone().name == "Asia/Jakarta"  # and by /etc/timezone, checked against them
    (tmp_path / "timezone").write_text("Europe/Berlin\n")  # a stale /etc/timezone is not believed
    assert zones_here.local_zone().name == "Asia/Jakarta"


def test_the_local_zone_without_localtime_is_utc(zones_here):
    assert zones_here.local_zone().name == "UTC"


def test_a_localtime_that_is_no_zone_cannot_be_named(zones_here, tmp_path):
    from lockrun.core.errors import UsageError

    (tmp_path / "localtime").write_bytes(b"TZif2 not really")
    with pytest.raises(UsageError, match="cannot name this host's local time zone"):
        zones_here.local_zone()


def test_periods_in_a_zone(zones_here):
    from lockrun.config.once import expand_once_key, once_key_for_period

    jakarta, utc = zones_here.parse_zone("Asia/Jakarta", "--tz"), zones_here.parse_zone("UTC", "--tz")
    assert once_key_for_period("day", MOMENT, zone=utc) == "2026-12-01"
    assert once_key_for_period("day", MOMENT, zone=jakarta) == "2026-12-02"
    assert once_key_for_period("hour", MOMENT, zone=jakarta) == "2026-12-02T03"
    assert zones_here.strftime("r-%Y-%m-%d", jakarta, MOMENT) == "r-2026-12-02"
    assert expand_once_key("plain") == "plain"
    assert zones_here.is_time_derived("r-%Y") and not zones_here.is_time_derived("plain")
    assert not zones_here.is_time_derived("100%%")


# --- zone records written by someone else: one line, exit 69 on both backends ------------------------

HUGE = "a" * 100_000


@pytest.mark.parametrize("value", [b"", b"\xff\xfe", HUGE.encode(), b"Mars/Olympus", b"\x1b[31mevil\nzone",
                                   b"list"], ids=["empty", "binary", "huge", "unknown", "escapes", "list"])
def test_a_redis_zone_record_that_is_not_ours_is_refused(env, redis_server, tmp_path, value):
    client = redis_server.client()
    key = "lockrun:{foreign}:once_tz"
    if value == b"list":
        client.rpush(key, "UTC")
    else:
        client.set(key, value)
    ran = tmp_path / "ran"
    refused = run_lockrun(env, "-n", "foreign", "--once-per", "day", "--", "touch", str(ran))
    assert refused.returncode == 69 and refused.stderr.count("\n") == 1, refused.stderr
    assert key in refused.stderr and f"redis-cli DEL '{key}'" in refused.stderr
    assert "Traceback" not in refused.stderr and "\x1b" not in refused.stderr and len(refused.stderr) < 600
    assert not ran.exists()
    client.delete(key)  # the fix the line names
    assert run_lockrun(env, "-n", "foreign", "--once-per", "day", "--", "touch", str(ran)).returncode == 0


@pytest.mark.parametrize("kind", ["binary", "one-field", "huge", "unknown", "no-newline", "directory", "fifo"])
def test_a_local_zone_record_that_is_not_ours_is_refused(local_env, tmp_path, kind):
    once_dir = Path(local_env["LOCKRUN_STATE_DIR"]) / "once" / "foreign"
    assert run_lockrun(local_env, "-n", "foreign", "--once-per", "day", "--", "true").returncode == 0
    zone_file = once_dir / "~zone"
    expires = zone_file.read_text().split()[0]
    zone_file.unlink()
    contents = {"binary": b"\xff\xfe", "one-field": f"{expires}\n".encode(), "huge": HUGE.encode(),
                "unknown": f"{expires} Mars/Olympus\n".encode(), "no-newline": f"{expires} UTC".encode()}
    if kind == "directory":
        zone_file.mkdir()
    elif kind == "fifo":
        os.mkfifo(zone_file, 0o600)
    else:
        zone_file.write_bytes(contents[kind])
        zone_file.chmod(0o600)
    for done in once_dir.iterdir():
        if done.name != "~zone":
            done.unlink()  # the day's mark: the run must get as far as the zone
    ran = tmp_path / "ran"
    refused = run_lockrun(local_env, "-n", "foreign", "--once-per", "day", "--", "touch", str(ran), timeout=20)
    assert refused.returncode == 69 and refused.stderr.count("\n") == 1, refused.stderr
    assert str(zone_file) in refused.stderr and f"rm -r '{zone_file}'" in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr) < 600
    assert not ran.exists()
    shutil.rmtree(zone_file) if kind == "directory" else zone_file.unlink()
    assert run_lockrun(local_env, "-n", "foreign", "--once-per", "day", "--", "touch", str(ran)).returncode == 0


def test_an_empty_local_zone_record_is_one_just_created(local_env):
    """lockrun creates ``~zone`` empty and writes it under its flock: an empty one (a run stopped in
    between) records nothing, and the next run records its zone."""
    once_dir = Path(local_env["LOCKRUN_STATE_DIR"]) / "once" / "fresh"
    once_dir.mkdir(parents=True, mode=0o700)
    once_dir.parent.chmod(0o700)
    (once_dir / "~zone").touch(mode=0o600)
    assert run_lockrun({**local_env, "TZ": "UTC"}, "-n", "fresh", "--once-per", "day", "--", "true").returncode == 0
    assert (once_dir / "~zone").read_text().split()[1] == "UTC"


@pytest.mark.parametrize("backend", ["redis", "local"])
def test_the_posix_and_right_copies_of_a_zone_are_that_zone(backend, env, local_env):
    environment = env if backend == "redis" else local_env
    job = ["--once-per", "hour", "--", "true"]
    first = run_lockrun(environment, "-n", "copies", "--tz", "Asia/Jakarta", *job)
    assert first.returncode == 0, first.stderr
    for other in (["--tz", "posix/Asia/Jakarta"], ["--tz", "right/Asia/Jakarta"]):
        again = run_lockrun(environment, "-n", "copies", *other, *job)
        assert again.returncode == 0 and again.stderr == "", again.stderr
    for tz in (":posix/Asia/Jakarta", "right/Asia/Jakarta", "/usr/share/zoneinfo/posix/Asia/Jakarta"):
        again = run_lockrun({**environment, "TZ": tz}, "-n", "copies", *job)
        assert again.returncode == 0 and again.stderr == "", (tz, again.stderr)
    if backend == "redis":
        assert redis_server_value(env, "lockrun:{copies}:once_tz") == b"Asia/Jakarta"


@pytest.mark.parametrize("backend", ["redis", "local"])
def test_a_zone_recorded_by_another_of_its_names_is_another_zone(backend, env, local_env, redis_server, tmp_path):
    """lockrun records a zone by its one canonical name; a record naming it otherwise
    (``posix/Asia/Jakarta``, written by hand) is compared as it is: a mismatch, one line, exit 2,
    the command does not run, and the record stays."""
    environment = env if backend == "redis" else local_env
    if backend == "redis":
        redis_server.client().set("lockrun:{copy}:once_tz", "posix/Asia/Jakarta", px=3_600_000)
    else:
        once_dir = Path(local_env["LOCKRUN_STATE_DIR"]) / "once" / "copy"
        once_dir.mkdir(parents=True, mode=0o700)
        once_dir.parent.chmod(0o700)
        (once_dir / "~zone").write_text(f"{time.time() + 3600!r} posix/Asia/Jakarta\n")
        (once_dir / "~zone").chmod(0o600)
    ran = tmp_path / "ran"
    result = run_lockrun(environment, "-n", "copy", "--tz", "Asia/Jakarta", "--once-per", "hour", "--",
                         "touch", str(ran))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "posix/Asia/Jakarta" in result.stderr and "this run in Asia/Jakarta" in result.stderr
    assert "Traceback" not in result.stderr and not ran.exists()
    if backend == "redis":
        assert redis_server.client().get("lockrun:{copy}:once_tz") == b"posix/Asia/Jakarta"
    else:
        assert (once_dir / "~zone").read_text().split()[1] == "posix/Asia/Jakarta"


def redis_server_value(env: dict, key: str) -> bytes | None:
    import redis

    return redis.Redis.from_url(env["LOCKRUN_REDIS_URL"]).get(key)
