"""timeline --fleet places every host's busy and duplicate skips in time, from the fleet
record's short ``skips`` list (docs/fleet.md "One fleet, one memory"); a list lockrun did not
write is read defensively."""

from __future__ import annotations

import re

from tests.conftest import wait_until


def figures(text: str, label: str) -> list[str]:
    """The runs, fail, skip, median, max and last columns of the row labelled ``label``."""
    for line in text.splitlines():
        if line.startswith(label + " ") and "|" in line:
            return line.rsplit("|", 1)[1].split()
    raise AssertionError(f"no row {label!r} in:\n{text}")


def test_busy_skips_of_another_host_are_in_the_fleet_timeline(hosts, redis_server):
    holder = hosts.spawn("app-a", "-n", "job", "--", "sleep", "60")
    client = redis_server.client()
    try:
        wait_until(lambda: client.exists("lockrun:{job}:lock"), what="app-a holds the lock")
        for _ in range(2):
            assert hosts.run("app-b", "-n", "job", "--", "true").returncode == 75
        entries = [e.decode() for e in client.lrange("lockrun:{job}:skips", 0, -1)]
        assert len(entries) == 2 and all(re.fullmatch(r"\d{13} busy app-b", e) for e in entries), entries
        assert client.pttl("lockrun:{job}:skips") > 0  # retained as the rest of the record is
        text = hosts.run("app-a", "timeline", "--fleet", "--since", "1h", "--width", "120").stdout
        assert figures(text, "job")[2] == "2", text
        by_host = hosts.run("app-a", "timeline", "--fleet", "--by-host", "--since", "1h", "--width", "120").stdout
        assert "app-b" in by_host and figures(by_host, "job (app-b)")[2] == "2", by_host
        # not in this host's own ledger: app-a's local timeline counts no skip of app-b
        local = hosts.run("app-a", "timeline", "--since", "1h", "--width", "120").stdout
        assert "job" not in local or figures(local, "job")[2] == "0", local
    finally:
        holder.terminate()
        holder.wait(30)


def test_the_list_is_short_and_foreign_entries_are_left_out(hosts, redis_server):
    client = redis_server.client()
    client.set("lockrun:{job}:lock", "someone", px=60000)
    for _ in range(40):
        client.lpush("lockrun:{job}:skips", "junk")
    for _ in range(35):
        assert hosts.run("app-b", "-n", "job", "--", "true").returncode == 75
    assert client.llen("lockrun:{job}:skips") == 32  # record_format.SKIPS_KEPT: the newest only
    client.lpush("lockrun:{job}:skips", "1 busy", "x" * 5000, "99999999999999999999 busy h", "\xff\xfe busy")
    text = hosts.run("app-a", "timeline", "--fleet", "--since", "1h", "--width", "120")
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    # The newest 32 are read (all lockrun keeps): the four foreign ones among them are left out.
    assert figures(text.stdout, "job")[2] == "28", text.stdout


def test_a_skips_key_of_another_type_breaks_neither_runs_nor_reads(hosts, redis_server):
    client = redis_server.client()
    client.set("lockrun:{job}:skips", "not a list")
    client.set("lockrun:{job}:lock", "someone", px=60000)
    assert hosts.run("app-b", "-n", "job", "--", "true").returncode == 75  # still counted, still busy
    assert client.hget("lockrun:{job}:counts", "busy") == b"1"
    result = hosts.run("app-a", "timeline", "--fleet", "--since", "1h", "--width", "120")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr


def test_a_skip_time_past_the_year_9999_is_left_out_not_an_internal_error(hosts, redis_server):
    client = redis_server.client()
    client.lpush("lockrun:{job}:skips", "999999999999999 busy h")  # 15 digits: the year 33658
    assert hosts.run("app-a", "-n", "job", "--", "true").returncode == 0
    result = hosts.run("app-a", "timeline", "--fleet", "--since", "1h", "--width", "120")
    assert result.returncode == 0 and "internal error" not in result.stderr, result.stderr
    assert figures(result.stdout, "job")[2] == "0", result.stdout


def test_only_the_newest_skips_lockrun_keeps_are_read(hosts, redis_server):
    # A list another writer grew is read no further than the newest SKIPS_KEPT (32) lockrun keeps:
    # a million entries would otherwise cost seconds and a gigabyte in every timeline --fleet.
    client = redis_server.client()
    assert hosts.run("app-a", "-n", "job", "--", "true").returncode == 0
    now_ms = int(client.time()[0]) * 1000
    client.lpush("lockrun:{job}:skips", *[f"{now_ms - i} busy h" for i in range(40)])
    result = hosts.run("app-a", "timeline", "--fleet", "--since", "1h", "--width", "120")
    assert result.returncode == 0, result.stderr
    assert figures(result.stdout, "job")[2] == "32", result.stdout
