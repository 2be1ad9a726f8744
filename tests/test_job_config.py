"""One table of settings, resolved once (docs/operating.md "The config file, per job"): flag >
environment > ``[job.NAME]`` > the file's top level > default, seen through ``lockrun config NAME``
and through real runs; an unknown key in a job's table is exit 78 naming the file, line and key."""

from __future__ import annotations

import json

from tests.conftest import assert_one_line, history, run_lockrun

CONFIG = """\
ttl = "2m"
retry_delay = "30s"
jitter = 5

[job.backup]
ttl = "7m"
retry = 2
jitter = 0
"""


def with_config(env: dict, tmp_path, text: str) -> dict:
    config = tmp_path / "jobs.toml"
    config.write_text(text)
    config.chmod(0o600)
    return {**env, "LOCKRUN_CONFIG": str(config)}


def settings(env: dict, name: str, *flags: str) -> dict:
    result = run_lockrun(env, "config", name, "--json", *flags)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["name"] == name
    return shown["settings"]


def test_each_setting_says_its_value_and_where_it_came_from(local_env, tmp_path):
    env = with_config(local_env, tmp_path, CONFIG)
    config = env["LOCKRUN_CONFIG"]
    backup = settings({**env, "LOCKRUN_TTL": "9m"}, "backup", "--retry", "4")
    assert backup["retry"] == {"value": 4, "source": "flag"}
    assert backup["ttl"] == {"value": 540, "source": "env LOCKRUN_TTL"}
    assert backup["jitter"] == {"value": 0, "source": f"{config} [job.backup]"}
    assert backup["retry_delay"] == {"value": 30, "source": config}
    assert backup["kill_after"] == {"value": 10, "source": "default"}
    assert backup["config"] == {"value": config, "source": "env LOCKRUN_CONFIG"}
    backup = settings(env, "backup")
    assert backup["ttl"] == {"value": 420, "source": f"{config} [job.backup]"}
    # Another name has no table: the top level, then the defaults.
    other = settings(env, "other")
    assert (other["ttl"]["value"], other["retry"]["value"], other["jitter"]["value"]) == (120, 0, 5)
    table = run_lockrun(env, "config", "backup")
    assert table.returncode == 0 and "settings of a run of backup:" in table.stdout
    assert any(line.split()[:2] == ["ttl", "7m"] and line.endswith(f"{config} [job.backup]")
               for line in table.stdout.splitlines()), table.stdout


def test_a_run_takes_its_jobs_table(env, tmp_path, redis_server):
    env = with_config(env, tmp_path, CONFIG)
    ran = run_lockrun(env, "-n", "backup", "-v", "--", "true")
    assert ran.returncode == 0 and "ttl 420s" in ran.stderr, ran.stderr
    other = run_lockrun(env, "-n", "other", "-v", "--jitter", "0", "--", "true")
    assert other.returncode == 0 and "ttl 120s" in other.stderr, other.stderr
    # retry = 2 from [job.backup]: a failing command runs three times under one lock.
    failing = run_lockrun(env, "-n", "backup", "--retry-delay", "0", "--", "false")
    assert failing.returncode == 1
    rows = [row for row in history(env, "backup") if row["status"] == "failed"]
    assert sorted(row["attempt"] for row in rows) == [1, 2, 3]


def test_an_unknown_or_misplaced_key_in_a_jobs_table_is_78_naming_file_line_and_key(local_env, tmp_path):
    cases = [
        ('[job.backup]\nttl = "7m"\nttll = 5\n', "line 3: unknown key 'ttll' in [job.backup]"),
        ('[job.backup]\nredis_url = "redis://h/0"\n', "line 2: 'redis_url' is not a run option"),
        ('[job.backup]\nname = "x"\n', "line 2: unknown key 'name' in [job.backup]"),
        ('[job."no spaces"]\nttl = 5\n', "line 1: [job.NAME]: invalid lock name 'no spaces'"),
        ("job = 3\n", "job must be tables [job.NAME]"),
        ('[job.backup]\nretry = "2"\n', "line 2: retry must be a whole number from 0 to 100, not '2'"),
        ('[job.backup]\nttl = 0\n', 'line 2: ttl must be seconds (90) or a duration string ("2m")'),
    ]
    ran = tmp_path / "ran"
    for text, words in cases:
        env = with_config(local_env, tmp_path, text)
        config = env["LOCKRUN_CONFIG"]
        assert_one_line(run_lockrun(env, "-n", "backup", "--", "touch", str(ran)), 78, f"config file {config}", words)
        assert_one_line(run_lockrun(env, "config", "backup"), 78, words)
    assert not ran.exists()


def test_a_top_level_default_gives_way_where_a_jobs_own_value_may_not(local_env, tmp_path):
    # min_hold at the top level is every job's default: a --slots job runs without it ...
    env = with_config(local_env, tmp_path, 'min_hold = "1s"\n[job.pool]\nslots = 2\n')
    assert run_lockrun(env, "-n", "pool", "--", "true").returncode == 0
    # ... but asked for by the job itself, it cannot go with --slots: exit 78 naming the file, in
    # a run and in `lockrun config` alike; given as flags, exit 2.
    env = with_config(local_env, tmp_path, '[job.pool]\nslots = 2\nmin_hold = "1s"\n')
    config = env["LOCKRUN_CONFIG"]
    for args in (("-n", "pool", "--", "true"), ("config", "pool")):
        assert_one_line(run_lockrun(env, *args), 78, f"config file {config} [job.pool]: --slots cannot be combined",
                        f"slots in {config} [job.pool], min_hold in {config} [job.pool]")
    assert_one_line(run_lockrun(local_env, "--slots", "2", "--min-hold", "1s", "-n", "p", "--", "true"), 2,
                    "--slots cannot be combined")


def test_settings_that_cannot_go_together_are_refused_wherever_each_was_set(local_env, tmp_path):
    # A run would take one cadence and drop the other without a word: refused, naming both places.
    env = with_config(local_env, tmp_path, 'every = "5m"\n[job.a]\nschedule = "*/5 * * * *"\n')
    config = env["LOCKRUN_CONFIG"]
    for args in (("-n", "a", "--", "true"), ("config", "a"), ("-n", "b", "--schedule", "* * * * *", "--", "true")):
        assert_one_line(run_lockrun(env, *args), 78, "--every and --schedule cannot be combined",
                        f"every in {config}")
    # A --once template from the file that expands to no valid key: the file is what to fix.
    env = with_config(local_env, tmp_path, '[job."b.c"]\nonce = "x %c"\n')
    config = env["LOCKRUN_CONFIG"]
    for args in (("-n", "b.c", "--", "true"), ("config", "b.c")):
        assert_one_line(run_lockrun(env, *args), 78, f'config file {config} [job."b.c"]: invalid --once key')
    assert_one_line(run_lockrun(local_env, "-n", "b.c", "--once", "x %c", "--", "true"), 2, "invalid --once key")


def test_only_the_settings_that_make_a_conflict_are_blamed(local_env, tmp_path):
    # A top-level min_hold gives way under --slots, and replace = false asks for nothing: the
    # conflict is the flags', exit 2.
    for text, flags in (("min_hold = 5\n", ("--slots", "2", "--replace")), ("replace = false\n", ("--slots", "2",
                                                                                                  "--min-hold", "5"))):
        env = with_config(local_env, tmp_path, text)
        assert_one_line(run_lockrun(env, "-n", "x", *flags, "--", "true"), 2, "--slots cannot be combined")
    env = with_config(local_env, tmp_path, "slots = 2\n")
    assert_one_line(run_lockrun(env, "-n", "x", "--min-hold", "5", "--", "true"), 78,
                    f"(slots in {env['LOCKRUN_CONFIG']})")


def test_a_file_toml_cannot_read_or_a_name_no_file_can_have_is_78(local_env, tmp_path):
    env = with_config(local_env, tmp_path, "a = " + "{b = " * 500 + "1" + "}" * 500 + "\n")
    assert_one_line(run_lockrun(env, "config", "x"), 78, "tables nested too deeply")
    env = {**local_env, "LOCKRUN_CONFIG": "a" * 5000}
    assert_one_line(run_lockrun(env, "-n", "x", "--", "true"), 78, "cannot be looked at")
    env = with_config(local_env, tmp_path, "[job.sync.invoices]\nttl = 5\n")
    assert_one_line(run_lockrun(env, "config", "sync.invoices"), 78, 'quoted, [job."sync.invoices"]')


def test_a_jobs_table_is_named_as_toml_spells_it_and_its_redact_rules_add_to_the_top_levels(local_env, tmp_path):
    env = with_config(local_env, tmp_path, 'redact = ["--sig"]\n[job."sync.invoices"]\nredact = ["-k"]\nttl = 5\n')
    config = env["LOCKRUN_CONFIG"]
    shown = settings(env, "sync.invoices")
    assert shown["ttl"]["source"] == f'{config} [job."sync.invoices"]'
    assert shown["redact"] == {"value": ["--sig", "-k"], "source": f'{config} + [job."sync.invoices"]'}
    assert settings(env, "other")["redact"]["value"] == ["--sig"]
    ran = run_lockrun(env, "-n", "sync.invoices", "--", "true", "--sig", "S1", "-k", "S2")
    assert ran.returncode == 0, ran.stderr
    [row] = history(env, "sync.invoices")
    assert "S1" not in json.dumps(row) and "S2" not in json.dumps(row), row


def test_a_big_config_file_loads_in_linear_time(local_env, tmp_path):
    # Each key's line used to be searched for as it was checked: 20,000 keys took minutes.
    jobs = "".join(f'[job.j{n}]\nttl = 5\nretry = 1\n' for n in range(10_000))
    env = with_config(local_env, tmp_path, jobs)
    shown = settings(env, "j9999")
    assert shown["retry"]["value"] == 1
    # A number too large for a float is a line, not a traceback.
    env = with_config(local_env, tmp_path, f"ttl = 1{'0' * 400}\n")
    assert_one_line(run_lockrun(env, "config", "x"), 78, "line 1: ttl must be")


def test_config_hides_a_urls_password_and_checks_what_it_is_given(local_env, tmp_path):
    env = with_config(local_env, tmp_path, 'redis_url = "redis://:hunter2@127.0.0.1:1/0"\n')
    shown = run_lockrun(env, "config", "backup", "--json")
    assert shown.returncode == 0 and "hunter2" not in shown.stdout
    assert json.loads(shown.stdout)["settings"]["redis_url"]["value"] == "redis://:***@127.0.0.1:1/0"
    assert "hunter2" not in run_lockrun(env, "config", "backup").stdout
    assert_one_line(run_lockrun(local_env, "config", "backup", "--ttl", "0"), 2, "--ttl")
    assert_one_line(run_lockrun(local_env, "config", "bad name"), 2, "invalid lock name")
    assert_one_line(run_lockrun({**local_env, "LOCKRUN_TTL": "soon"}, "config", "backup"), 2, "LOCKRUN_TTL")


def test_a_url_setting_of_the_wrong_shape_is_shown_without_its_secrets(local_env, tmp_path):
    for text in ('redis_url = {u = "redis://:S3CRET@h/0"}\n', 'ping = {url = "https://u:S3CRET@hc.example/S3CRET"}\n',
                 'notify_urls = [{u = "https://u:S3CRET@h.example/x"}, 5]\n', 'ping = "https://u:S3CRET@h.example:99999/"\n',
                 'redis_url = "redis://:S3CRET#x@h/0"\n'):
        env = with_config(local_env, tmp_path, text)
        for args in (("-n", "a", "--", "true"), ("config", "a"), ("status",)):
            result = run_lockrun(env, *args)
            assert_one_line(result, 78, "line 1")
            assert "S3CRET" not in result.stderr + result.stdout
    shown = settings({**local_env, "LOCKRUN_CONFIG": ""}, "a", "--ping", "https://u:S3CRET@hc.example/S3CRET",
                     "--notify", "https://h.example/x?token=S3CRET")
    assert "S3CRET" not in json.dumps(shown)
