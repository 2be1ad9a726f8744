"""Validators and the settings precedence, tested as plain functions."""

import os
import time

import pytest

from lockrun.config import file, settings, values
from lockrun.core.errors import ConfigError, UsageError
from lockrun.core.redis_url import redact_url, validate_redis_url, without_password
from lockrun.run.notify import Sending


@pytest.mark.parametrize("name", ["a", "sync-invoices", "A.b_c:d@e/f-g", "9" * 200])
def test_valid_names(name):
    assert values.validate_name(name) == name


@pytest.mark.parametrize("name", ["", "-a", ".a", "a b", "a{b}", "ä", "a*", "x" * 201, "/abs"])
def test_invalid_names(name):
    with pytest.raises(UsageError, match="invalid lock name"):
        values.validate_name(name)


def test_default_name_keeps_argument_boundaries():
    assert values.default_name(["frob", "foo bar"]) != values.default_name(["frob", "foo", "bar"])
    assert values.default_name(["true"]) == values.default_name(["true"])
    assert values.default_name(["true"]).startswith("cmd-") and len(values.default_name(["true"])) == 16


@pytest.mark.parametrize("text,value", [("1", 1.0), ("0.5", 0.5), ("120", 120.0), ("2.", 2.0), (".25", 0.25),
                                        ("1s", 1.0), ("2m", 120.0), ("1.5h", 5400.0), ("7d", 604800.0)])
def test_seconds(text, value):
    """One syntax for every time value: a bare number of seconds, or a number with a unit."""
    assert values.parse_seconds(text, "--x") == value
    assert values.parse_duration(text, "--x") == value
    assert values.parse_min_hold(text, "--x") == value


@pytest.mark.parametrize("text", ["0", "-1", "abc", "1e3", "inf", "nan", "", "1 s", " ", "2M", "1w", "s", "1ms"])
def test_bad_seconds(text):
    with pytest.raises(UsageError):
        values.parse_seconds(text, "--x")


def test_seconds_minimum_and_zero():
    assert values.parse_seconds("0", "--wait", allow_zero=True) == 0
    with pytest.raises(UsageError, match="at least 1"):
        values.parse_seconds("0.5", "--ttl", minimum=1)


@pytest.mark.parametrize("text,value", [("90s", 90), ("15m", 900), ("12h", 43200), ("7d", 604800), ("1.5h", 5400)])
def test_durations(text, value):
    assert values.parse_duration(text, "--since") == value


@pytest.mark.parametrize("text", ["15x", "-1h", "0s", "h", "", "0"])
def test_bad_durations(text):
    with pytest.raises(UsageError):
        values.parse_duration(text, "--since")


@pytest.mark.parametrize(
    "url,shown",
    [
        ("redis://:s3cret@host:6379/0", "redis://:***@host:6379/0"),
        ("redis://user:s3cret@host/0", "redis://user:***@host/0"),
        ("rediss://user@host/0", "rediss://user@host/0"),
        ("unix:///run/redis.sock?password=s3cret&db=1", "unix:///run/redis.sock?password=***&db=1"),
        ("redis://host", "redis://host"),
        ("rediss://host/0?ssl_password=s3cret&ssl_keyfile=/k.pem", "rediss://host/0?ssl_password=***&ssl_keyfile=/k.pem"),
        ("rediss://host/0?SSL_Password=s3cret", "rediss://host/0?SSL_Password=***"),
    ],
)
def test_redact_url(url, shown):
    assert redact_url(url) == shown
    assert "s3cret" not in redact_url(url)


@pytest.mark.parametrize("url", ["http://host", "host:6379", "redis://host:notaport", "unix://"])
def test_bad_redis_urls(url):
    with pytest.raises(UsageError, match="invalid Redis URL"):
        validate_redis_url(url)


def test_the_commands_environment_keeps_no_password_of_the_url():
    url = without_password("rediss://u:s3cret@host/0?ssl_password=s3cret&ssl_keyfile=/k.pem&password=s3cret")
    assert url == "rediss://u@host/0?ssl_keyfile=/k.pem"


@pytest.mark.parametrize("url", ["redis+sentinel://:pw@h:1,h2:2/m/0?sentinel_password=s3cret",
                                 "redis+cluster://h:7000/?ssl_password=s3cret"])
def test_cluster_and_sentinel_urls_take_no_query_parameters(url):
    with pytest.raises(UsageError, match="takes no query parameters") as info:
        validate_redis_url(url)
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize("url", ["https://hc.example/ping/a b", "https://u:s3cret@hc.example/a\r\nX-Evil: 1",
                                 "https://u:s3cret@hc.example/bücher", "https://hc.example/\x00"])
def test_an_http_url_a_client_could_not_send_is_refused_as_it_is_read(url):
    with pytest.raises(UsageError, match="printable ASCII") as info:
        values.validate_http_url(url, "--notify")
    assert "s3cret" not in str(info.value)


def test_a_delivery_that_raises_is_one_line_without_the_url(capfd):
    def send():
        raise UnicodeEncodeError("ascii", "https://u:s3cret@h/ü", 0, 1, "no")

    sending = Sending("https://h/…", send, "ping")
    failure = sending.result(time.monotonic() + 10)
    assert failure == "https://h/…: ping not sent (UnicodeEncodeError)"
    assert capfd.readouterr().err == ""  # no thread traceback, which would have printed the URL


def test_bad_url_message_hides_password():
    with pytest.raises(UsageError) as info:
        validate_redis_url("http://:s3cret@host")
    assert "s3cret" not in str(info.value)


def test_precedence_flag_env_file_default(tmp_path, monkeypatch):
    config = tmp_path / "c.toml"
    config.write_text('redis_url = "redis://file-host/0"\nttl = 30\nprefix = "f:"\n')
    monkeypatch.setenv("LOCKRUN_STATE_DIR", str(tmp_path / "state"))
    resolved = settings.settings_for({"config": str(config)})
    assert (resolved.redis_url, resolved.ttl, resolved.prefix) == ("redis://file-host/0", 30.0, "f:")
    assert resolved.ledger_path == tmp_path / "state" / "ledger.db"
    resolved = settings.settings_for({"config": str(config), "redis_url": "redis://flag/0", "ttl": 5.0, "prefix": "x:"})
    assert (resolved.redis_url, resolved.ttl, resolved.prefix) == ("redis://flag/0", 5.0, "x:")
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    resolved = settings.settings_for({"config": str(empty)})
    assert (resolved.redis_url, resolved.ttl, resolved.prefix) == (None, 60.0, "lockrun:")


@pytest.mark.parametrize(
    "text,message",
    [
        ("ttl = ", "invalid TOML"),
        ("colour = 1", "unknown key 'colour'"),
        ('ttl = "60x"', r"line 1: ttl must be seconds \(90\) or a duration string"),
        ('ttl = "366d"', "line 1: ttl must be"),
        ('min_hold = 0', "min_hold must be"),
        ('socket_timeout = "301"', "socket_timeout must be"),
        ("\n\nttl = 0.5", "line 3: ttl must be"),
        ('redis_url = "http://x"', "invalid Redis URL"),
        ("ttl = true", "ttl must be"),
        ("prefix = 3", "prefix must be a string"),
        ("ledger_keep_days = 0", "ledger_keep_days must be"),
        ("ledger_keep_days = 1.5", "ledger_keep_days must be"),
        ("fleet_keep_runs = 0", "fleet_keep_runs must be"),
        ("fleet_keep_runs = 1000001", "fleet_keep_runs must be"),
        ("fleet_keep_days = 3651", "fleet_keep_days must be"),
        ('fleet_keep_days = "90"', "fleet_keep_days must be"),
    ],
)
def test_bad_config_files(tmp_path, text, message):
    config = tmp_path / "c.toml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        file.load_config(str(config))
    assert str(config) in str(info.value)


def test_fleet_retention_from_the_config_file(tmp_path, monkeypatch):
    """docs/fleet.md "One fleet, one memory": fleet_keep_runs and fleet_keep_days are config-file keys."""
    config = tmp_path / "c.toml"
    config.write_text("fleet_keep_runs = 5\nfleet_keep_days = 7\n")
    monkeypatch.setenv("LOCKRUN_STATE_DIR", str(tmp_path / "state"))
    resolved = settings.settings_for({"config": str(config)})
    assert (resolved.fleet_keep_runs, resolved.fleet_keep_days) == (5, 7)
    config.write_text("")
    # The defaults, chosen for a Redis shared with other work (docs/fleet.md).
    resolved = settings.settings_for({"config": str(config)})
    assert (resolved.fleet_keep_runs, resolved.fleet_keep_days) == (300, 30)


def test_missing_explicit_config(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        file.load_config(str(tmp_path / "nope.toml"))


def test_world_writable_config_refused(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("")
    os.chmod(config, 0o666)
    with pytest.raises(ConfigError, match="writable by group or others"):
        file.load_config(str(config))
