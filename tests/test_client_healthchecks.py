"""healthchecks pings against a server that enforces healthchecks' own rules (tests/healthchecks_server.py
names the source of each): a canonical UUID rid, one rid for the start and the end of a run (so the
server pairs them and shows a duration), and a body cut by lockrun so that its END arrives within
the server's Ping-Body-Limit (docs/operating.md "Telling someone")."""

from __future__ import annotations

import json
import re
import sqlite3
import urllib.error
import urllib.request
import uuid

import pytest

from tests.conftest import history, run_lockrun
from tests.healthchecks_server import HealthchecksServer
from tests.real_clients import readme_command, shell_words

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # lower case: contract §16


@pytest.fixture
def hc():
    server = HealthchecksServer()
    yield server
    server.close()


def refused(server: HealthchecksServer) -> list[tuple[str, int]]:
    return [(path, status) for path, _, status in server.received if status != 200]


def test_the_stand_in_refuses_what_healthchecks_refuses(hc):
    """The server this file tests against is strict (RID): a hex rid, as lockrun once sent, is 400
    and not recorded; a canonical one is kept."""
    url = hc.new_check()

    def post(query: str) -> int:
        try:
            with urllib.request.urlopen(urllib.request.Request(f"{url}/start?{query}", data=b"", method="POST"),
                                        timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert post(f"rid={uuid.uuid4().hex}") == 400
    assert hc.pings(url) == []
    assert post(f"rid={uuid.uuid4()}") == 200 and len(hc.pings(url)) == 1


def test_start_and_end_carry_the_runs_uuid_and_the_server_pairs_them(local_env, hc, tmp_path):
    url = hc.new_check()
    seen = tmp_path / "rid"
    result = run_lockrun(local_env, "-n", "hc-ok", "--ping", url, "--", "sh", "-c", f'echo "$LOCKRUN_RUN_ID" > {seen}')
    assert result.returncode == 0 and result.stderr == "", result.stderr
    pings = hc.pings(url)
    assert [p.kind for p in pings] == ["start", "success"] and refused(hc) == []
    rid = seen.read_text().strip()
    assert UUID.fullmatch(rid), rid  # LOCKRUN_RUN_ID, the ledger and the pings: one format
    assert pings[0].rid == pings[1].rid == rid == history(local_env)[0]["run_id"]
    assert pings[1].duration is not None  # PAIRING: the server matched the end to its start


def test_the_end_of_a_long_failing_output_arrives_whole(local_env, hc):
    """The open-source server keeps the first 10,000 bytes (BODY): lockrun sends at most that,
    the end of the output (where the error is), under one line saying how much was cut."""
    url = hc.new_check()
    script = 'i=0; while [ $i -lt 4000 ]; do echo "progress line $i"; i=$((i+1)); done; echo "ERROR: disk full"; exit 3'
    result = run_lockrun(local_env, "-n", "hc-long", "--capture-tail", "64k", "--ping", url, "--", "sh", "-c", script)
    assert result.returncode == 3
    assert [p.kind for p in hc.pings(url)] == ["start", "fail"] and refused(hc) == []
    end = hc.pings(url)[1]
    assert end.exitstatus == 3 and end.rid == hc.pings(url)[0].rid and end.duration is not None
    sent = [body for path, body, _ in hc.received if "/3?" in path][0]
    assert len(sent) <= 10_000 and end.body == sent  # the server dropped nothing lockrun sent
    first, _, rest = end.body.decode().partition("\n")
    assert re.fullmatch(r"\[lockrun: the first (\d+) of (\d+) bytes of this output were cut to fit the server's"
                        r" Ping-Body-Limit of 10000 bytes\]", first), first
    assert rest.endswith("progress line 3999\nERROR: disk full\n")
    cut, total = map(int, re.findall(r"\d+", first)[:2])
    assert total - cut == len(rest.encode())


def test_a_server_that_keeps_less_says_so_and_gets_less(local_env):
    """Ping-Body-Limit (BODY) read from the start ping's answer: a server keeping 300 bytes gets 300."""
    server = HealthchecksServer(body_limit=300)
    try:
        url = server.new_check()
        result = run_lockrun(local_env, "-n", "hc-small", "--capture-tail", "8k", "--ping", url, "--", "sh", "-c",
                             "seq 1 2000; echo 'ERROR: the reason'; exit 5")
        assert result.returncode == 5
        end = server.pings(url)[-1]
        sent = [body for path, body, _ in server.received if "/5?" in path][0]
        assert len(sent) <= 300 and end.body == sent
        assert end.body.startswith(b"[lockrun: the first ") and end.body.endswith(b"2000\nERROR: the reason\n")
    finally:
        server.close()


def test_retried_attempts_ping_once_with_the_first_attempts_rid(local_env, hc):
    url = hc.new_check()
    result = run_lockrun(local_env, "-n", "hc-retry", "--retry", "1", "--retry-delay", "0", "--ping", url, "--",
                         "sh", "-c", "exit 4")
    assert result.returncode == 4
    pings = hc.pings(url)
    assert [p.kind for p in pings] == ["start", "fail"] and pings[0].rid == pings[1].rid
    assert pings[1].duration is not None
    rows = history(local_env)
    assert [row["attempt"] for row in rows] == [2, 1]
    assert {row["first_run_id"] for row in rows} == {pings[0].rid} == {rows[1]["run_id"]}
    assert all(UUID.fullmatch(row["run_id"]) for row in rows)


def test_the_readmes_ping_line_works_as_written(local_env, hc, tmp_path):
    """README "Get told on failure", run as written but for its endpoints and its command."""
    url = hc.new_check()
    job = tmp_path / "sync-invoices"
    job.write_text("#!/bin/sh\necho syncing; echo 'ERROR: upstream refused' >&2; exit 2\n")
    job.chmod(0o755)
    hook = hc.url + "/not-a-ping"  # a 404 there: a failed webhook is a warning, never the run's exit code
    argv = shell_words(readme_command("--ping https://hc-ping.com/your-check-uuid"), {
        "https://hc-ping.com/your-check-uuid": url, "https://hooks.slack.com/services/T000/B000/XXXX": hook,
        "/opt/app/bin/sync-invoices": str(job), "/usr/local/bin/lockrun": "lockrun"})
    assert argv[0] == "lockrun"
    result = run_lockrun(local_env, *argv[1:])
    assert result.returncode == 2
    pings = hc.pings(url)
    assert [p.kind for p in pings] == ["start", "fail"] and pings[0].rid == pings[1].rid
    assert pings[1].body == b"syncing\nERROR: upstream refused\n"


def test_run_ids_are_uuids_in_the_fleet_record_and_old_hex_ids_still_read(env, tmp_path):
    """One format everywhere (contract §16): the fleet record, history, show (by a prefix with or
    without its dashes). A ledger row an earlier build wrote with 32 bare hex digits still shows."""
    assert run_lockrun(env, "-n", "ids", "--", "true").returncode == 0
    row = history(env)[0]
    rid = row["run_id"]
    assert UUID.fullmatch(rid)
    fleet = json.loads(run_lockrun(env, "history", "--fleet", "--json").stdout)
    assert [r["run_id"] for r in fleet] == [rid]
    for prefix in (rid[:8], rid[:13], rid.replace("-", "")[:12], rid.upper()[:13]):
        shown = run_lockrun(env, "show", prefix, "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout)["run_id"] == rid, (prefix, shown.stderr)
        assert json.loads(run_lockrun(env, "show", prefix, "--fleet", "--json").stdout)["run_id"] == rid
    old = uuid.uuid4().hex
    db = sqlite3.connect(tmp_path / "state" / "ledger.db")
    with db:
        db.execute("INSERT INTO runs (run_id, name, status, host, pid, command, backend, started_at, ended_at,"
                   " duration_s, exit_code, exit_status) SELECT ?, name, status, host, pid, command, backend,"
                   " started_at, ended_at, duration_s, exit_code, exit_status FROM runs WHERE run_id = ?", (old, rid))
    db.close()
    for prefix in (old[:8], old):
        shown = run_lockrun(env, "show", prefix, "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout)["run_id"] == old, shown.stderr
    assert {r["run_id"] for r in history(env)} == {rid, old}
    bad = run_lockrun(env, "show", "3f2a-")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) >= 1
