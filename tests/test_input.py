"""Bad input: one line on stderr, a documented exit code, never a traceback."""

from __future__ import annotations

import re

import pytest

from tests.conftest import run_lockrun


def assert_one_line(result, code: int, *needles: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("lockrun: ") and result.stderr.count("\n") == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args,needle",
    [
        (["-n", "bad name", "--", "true"], "invalid lock name"),
        (["-n", "-dash", "--", "true"], "invalid lock name"),
        (["-n", "x" * 201, "--", "true"], "1 to 200 characters"),
        (["-n", "a{b}", "--", "true"], "invalid lock name"),
        (["--ttl", "0", "--", "true"], "--ttl"),
        (["--ttl", "0.5", "--", "true"], "at least 1"),
        (["--ttl", "-5", "--", "true"], "--ttl"),
        (["--ttl", "abc", "--", "true"], "--ttl"),
        (["--ttl", "nan", "--", "true"], "--ttl"),
        (["-w", "-1", "--", "true"], "--wait"),
        (["--wait", "soon", "--", "true"], "--wait"),
        (["--timeout", "0", "--", "true"], "--timeout"),
        (["--timeout", "1w", "--", "true"], "--timeout"),
        (["--timeout", "366d", "--", "true"], "at most 365d"),
        (["--ttl", "2 m", "--", "true"], "2m, 1.5h, 7d"),
        (["--min-hold", "0", "--", "true"], "more than 0"),
        (["--remember", "36501d", "--", "true"], "at most 36500d"),
        (["--kill-after", "-1", "--", "true"], "--kill-after"),
        (["--on-lost", "ignore", "--", "true"], "--on-lost"),
        (["-E", "256", "--", "true"], "--busy-exit-code"),
        (["-E", "x", "--", "true"], "--busy-exit-code"),
        (["--redis-url", "http://localhost", "--", "true"], "scheme"),
        (["--redis-url", "redis://h:notaport", "--", "true"], "invalid Redis URL"),
        (["--no-such-flag", "--", "true"], "no-such-flag"),
        (["-n", "x"], "COMMAND"),
        (["-n", "x", "--"], "COMMAND"),
        (["--ttl"], "--ttl"),
    ],
)
def test_bad_run_input_is_a_usage_error(env, tmp_path, args, needle):
    for form in (["run"], []):  # both the subcommand and the bare form
        assert_one_line(run_lockrun(env, *form, *args), 2, needle)


def test_run_without_any_argument_is_a_usage_error(env):
    assert_one_line(run_lockrun(env, "run"), 2, "COMMAND")


def test_unknown_subcommand_is_a_usage_error(env):
    assert_one_line(run_lockrun(env, "frobnicate"), 2, "frobnicate")


def test_bad_env_values_are_usage_errors(env):
    env["LOCKRUN_TTL"] = "zero"
    assert_one_line(run_lockrun(env, "-n", "x", "--", "true"), 2, "--ttl")
    env.pop("LOCKRUN_TTL")
    env["LOCKRUN_REDIS_URL"] = "memcached://host"
    assert_one_line(run_lockrun(env, "-n", "x", "--", "true"), 2, "scheme")


def test_bad_url_query_is_a_usage_error(env, redis_server):
    env["LOCKRUN_REDIS_URL"] = redis_server.url + "?socket_timeout=soon"
    assert_one_line(run_lockrun(env, "-n", "x", "--", "true"), 2, "invalid Redis URL")


def test_bad_read_command_input(env):
    assert_one_line(run_lockrun(env, "history", "--since", "tomorrowish"), 2, "--since", "yesterday, 14:00")
    assert_one_line(run_lockrun(env, "history", "--limit", "0"), 2, "--limit")
    assert_one_line(run_lockrun(env, "history", "--status", "great"), 2, "--status")
    assert_one_line(run_lockrun(env, "status", "bad name"), 2, "invalid lock name")


def test_no_redis_configured_uses_the_local_backend(local_env, tmp_path):
    result = run_lockrun(local_env, "-n", "x", "--", "echo", "hi")
    assert (result.returncode, result.stdout, result.stderr) == (0, "hi\n", "")
    assert (tmp_path / "state" / "locks" / "x.lock").exists()


def test_unusable_state_dir_is_69(local_env, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    local_env["LOCKRUN_STATE_DIR"] = str(blocker / "state")
    ran = tmp_path / "ran"
    result = run_lockrun(local_env, "-q", "-n", "x", "--", "touch", str(ran))
    assert_one_line(result, 69, "state directory", "is a file, not a directory")
    assert not ran.exists()


def test_configured_but_unreachable_redis_never_falls_back_to_local(env, tmp_path, redis_server):
    redis_server.kill()
    result = run_lockrun(env, "-n", "x", "--", "true")
    assert result.returncode == 69
    assert not (tmp_path / "state" / "locks").exists()


def test_config_file_supplies_the_url_and_errors_are_78(env, tmp_path, redis_server):
    env.pop("LOCKRUN_REDIS_URL")
    config = tmp_path / "lockrun.toml"
    config.write_text(f'redis_url = "{redis_server.url}"\nttl = 5\n')
    env["LOCKRUN_CONFIG"] = str(config)
    assert run_lockrun(env, "-n", "cfg", "--", "true").returncode == 0
    config.write_text("ttl = 'long'\n")
    assert_one_line(run_lockrun(env, "-n", "cfg", "--", "true"), 78, str(config), "line 1")
    config.write_text("[broken\n")
    assert_one_line(run_lockrun(env, "-n", "cfg", "--", "true"), 78, "invalid TOML")
    env["LOCKRUN_CONFIG"] = str(tmp_path / "missing.toml")
    assert_one_line(run_lockrun(env, "status"), 78, "does not exist")


def test_help_and_version(env):
    from lockrun import __version__

    for args in (["--version"],):
        result = run_lockrun(env, *args)
        assert (result.returncode, result.stdout) == (0, f"lockrun {__version__}\n")
    for args in (["--help"], ["-h"], ["run", "--help"], ["status", "-h"], ["history", "--help"]):
        result = run_lockrun(env, *args)
        assert result.returncode == 0 and result.stdout.startswith("Usage: lockrun")
    assert "Commands:" in run_lockrun(env, "--help").stdout
    assert "--on-lost" in run_lockrun(env, "-n", "x", "--help").stdout  # bare form: run's help


def test_plain_lockrun_prints_the_help_on_several_lines(local_env):
    """No arguments: the help as `lockrun --help` prints it (not squashed into one line), on stderr,
    exit 2 (README "Exit codes": a missing command is a usage error)."""
    result = run_lockrun(local_env)
    assert result.returncode == 2, result
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr == run_lockrun(local_env, "--help").stdout
    lines = result.stderr.splitlines()
    assert lines[0] == "Usage: lockrun [OPTIONS] COMMAND [ARGS]..." and "Commands:" in lines
    assert max(map(len, lines)) <= 100


def test_python_dash_m_works(env):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "lockrun", "--version"], env=env, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("lockrun ")


# --- numbers in ASCII digits, values quoted short, bytes as \xff (one rule everywhere) -----------

NOT_ASCII = [  # Arabic-Indic digits look like numbers to Python's int() and float() and \d
    ["--ttl", "١٢"], ["--min-hold", "٣s"], ["--retry", "٢"], ["--slots", "٢"], ["-E", "٣"], ["--wait", "٥"],
    ["--capture-tail", "٣k"], ["--timeout", "1٠m"], ["--jitter", "٣"], ["--success-exit", "٢٤"], ["--every", "٥m"],
    ["--schedule", "٠ ٣ * * *"], ["--replicas", "١"],
]
SPACED = [["--retry", " 2"], ["--ttl", "12 "], ["--slots", " 2"], ["-E", "3 "], ["--capture-tail", " 1k"],
          ["--replicas", "1 "], ["--success-exit", "1, 24"], ["--wait", " 5"]]


@pytest.mark.parametrize("args", NOT_ASCII + SPACED, ids=lambda args: " ".join(args))
def test_a_number_is_ascii_digits_and_nothing_else(local_env, args):
    assert_one_line(run_lockrun(local_env, "-n", "x", *args, "--", "true"), 2, args[0])


@pytest.mark.parametrize("args", [
    ["history", "--limit", "٣"], ["history", "--limit", " 3"], ["timeline", "--width", "٨٠"],
    ["history", "--since", "٢h"], ["history", "--since", " 2h"], ["history", "--since", "٢٠٢٦-01-01"],
    ["pause", "x", "--for", "١h"], ["pause", "x", "--until", "١٤:٠٠"], ["check", "--max-age", "٢d"],
    ["prune", "--older-than", "٩٠d"],
], ids=" ".join)
def test_every_read_command_takes_ascii_digits_only(local_env, args):
    assert_one_line(run_lockrun(local_env, *args), 2, args[-2])


def test_the_environment_and_the_config_file_take_ascii_digits_only(local_env, tmp_path, redis_server):
    assert_one_line(run_lockrun({**local_env, "LOCKRUN_TTL": "١٢"}, "-n", "x", "--", "true"), 2, "LOCKRUN_TTL")
    assert_one_line(run_lockrun({**local_env, "LOCKRUN_TTL": " 12"}, "-n", "x", "--", "true"), 2, "LOCKRUN_TTL")
    for url in (f"redis://127.0.0.1:{redis_server.port}/٠", "redis://127.0.0.1:٦٣٧٩/0", f"{redis_server.url}?db=٣"):
        assert_one_line(run_lockrun({**local_env, "LOCKRUN_REDIS_URL": url}, "-n", "x", "--", "true"), 2,
                        "invalid Redis URL", "ASCII digits" if "٦" not in url else "")
    config = tmp_path / "config.toml"
    for line in ('ttl = "١٢"', 'min_hold = "٣s"', 'retry = "2"', 'replicas = "١"', 'success_exit = "٢٤"',
                 'jitter = " 5"', 'socket_timeout = "٢"'):
        config.write_text(line + "\n")
        assert_one_line(run_lockrun(local_env, "-n", "x", "--", "true"), 78, "line 1", line.split()[0])


LONG = "x" * 100_000


@pytest.mark.parametrize("args", [
    ["pause", "job", "--for", "1h", "--reason", LONG], ["-n", LONG, "--", "true"], ["--ttl", LONG, "--", "true"],
    ["--on-lost", LONG, "--", "true"], ["--retry", LONG, "--", "true"], ["history", "--since", LONG],
    ["--tz", LONG, "--", "true"], ["--" + LONG], ["history", "job", LONG], ["--redis-url", "redis://" + LONG + ":x"],
    ["--once", LONG, "--", "true"], ["show", LONG], ["-n", "x", "--", "/" + LONG],
], ids=lambda args: " ".join(arg[:12] for arg in args))
def test_an_error_line_quotes_a_short_prefix_of_a_long_value(local_env, args):
    result = run_lockrun(local_env, *args)
    assert result.returncode in (2, 127), result.stderr[:300]
    assert result.stderr.count("\n") == 1 and len(result.stderr) < 600, result.stderr[:600]
    assert re.search(r"…'? \(1000[0-9][0-9] characters\)", result.stderr), result.stderr  # said how long it was


@pytest.mark.parametrize("args", [
    ["-n", "\udcff", "--", "true"], ["--on-lost", "\udcff", "--", "true"], ["--ttl", "1\udcff", "--", "true"],
    ["history", "--since", "\udcff"], ["--\udcff"], ["pause", "x", "--for", "1h", "--reason", "a\udcffb\x01"],
    ["--tz", "\udcff", "--", "true"], ["history", "job", "\udcff"], ["-n", "x", "--", "\udcff"],
], ids=lambda args: " ".join(arg.encode("utf-8", "surrogateescape").hex()[:16] for arg in args))
def test_a_byte_that_is_not_utf8_is_shown_as_backslash_x(local_env, args):
    result = run_lockrun(local_env, *args)
    assert result.returncode in (2, 127) and result.stderr.count("\n") == 1, result.stderr
    assert "\\xff" in result.stderr and "udcff" not in result.stderr, result.stderr


def test_an_empty_program_is_named_as_such(local_env):
    assert_one_line(run_lockrun(local_env, "-n", "x", "--", ""), 127, "lockrun: '': command not found in PATH")
