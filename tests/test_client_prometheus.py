"""--metrics-file and `lockrun metrics` against the real Prometheus tools (contract §16,
docs/operating.md "Metrics for Prometheus"): `promtool check metrics` on every output, and the
real node_exporter scraping a textfile directory of one file per job, as the README sets it up:
HTTP 200, no scrape error, each series once. Then what a directory of such files needs from the
writer: complete files, never an older count, and a path lockrun could never write refused
before the command runs."""

from __future__ import annotations

import re
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import assert_one_line, free_port, history, run_lockrun, spawn_lockrun, wait_until
from tests.real_clients import program, readme_command, shell_words

README_DIR = "/var/lib/prometheus/node-exporter/"  # Debian's textfile directory: the README's example


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    promtool = program("promtool", "prometheus")
    return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)


def series(text: str) -> list[str]:
    """The series of an exposition (name and labels, no value), in order."""
    return [line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")]


def job_script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def readme_job(env: dict, tmp_path: Path, textfiles: Path, name: str, body: str) -> subprocess.CompletedProcess:
    """The README's --metrics-file line as written, for job ``name`` (its name, the file's and the
    command's swapped together: one file per job), with the textfile directory and command the test's."""
    line = readme_command("--metrics-file " + README_DIR)
    job = job_script(tmp_path, name, body)
    argv = shell_words(line.replace("sync-invoices", name), {
        README_DIR: f"{textfiles}/", f"/opt/app/bin/{name}": str(job), "/usr/local/bin/lockrun": "lockrun"})
    assert argv[0] == "lockrun" and f"{textfiles}/lockrun-{name}.prom" in argv
    return run_lockrun(env, *argv[1:])


def test_every_output_passes_promtool(local_env, tmp_path):
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    assert readme_job(local_env, tmp_path, textfiles, "sync-invoices", "exit 0").returncode == 0
    assert readme_job(local_env, tmp_path, textfiles, "sync-invoices", "exit 3").returncode == 3
    odd = 'we"ird\\name'  # a name lockrun refuses; a label value escaped all the same is checked below
    assert run_lockrun(local_env, "-n", "slow.job", "--warn-after", "1", "--metrics-file",
                       str(textfiles / "lockrun-slow.prom"), "--", "sleep", "1.3").returncode == 0
    outputs = [path.read_text() for path in sorted(textfiles.glob("*.prom"))]
    outputs.append(run_lockrun(local_env, "metrics").stdout)
    assert len(outputs) == 3 and all(outputs)
    for text in outputs:
        checked = promtool_check(text)
        assert checked.returncode == 0 and checked.stdout == "" and checked.stderr == "", (text, checked)
    own = (textfiles / "lockrun-sync-invoices.prom").read_text()
    assert 'lockrun_runs_total{name="sync-invoices",status="failed"} 1' in own
    assert 'name="slow.job"' not in own and "lockrun_slow_runs_total{name=\"slow.job\"} 1" in outputs[0]
    from lockrun.ledger.metrics import escape_label

    assert promtool_check(f'# HELP x Odd.\n# TYPE x gauge\nx{{name="{escape_label(odd)}"}} 1\n').returncode == 0


def test_promtool_finds_what_it_should(tmp_path):
    """The check above has teeth: promtool refuses a malformed exposition."""
    assert promtool_check('# TYPE lockrun_runs_total counter\nlockrun_runs_total{name="a" 1\n').returncode != 0


class NodeExporter:
    def __init__(self, textfiles: Path) -> None:
        binary = program("prometheus-node-exporter", "prometheus-node-exporter", "/usr/bin/node_exporter")
        self.url = f"http://127.0.0.1:{free_port()}/metrics"
        self.proc = subprocess.Popen(
            [binary, f"--web.listen-address={self.url.split('/')[2]}", "--collector.disable-defaults",
             "--collector.textfile", f"--collector.textfile.directory={textfiles}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_until(self._up, timeout=30, what="node_exporter to listen")

    def _up(self) -> bool:
        assert self.proc.poll() is None, self.proc.stderr.read() if self.proc.stderr else ""
        try:
            self.scrape()
        except OSError:
            return False
        return True

    def scrape(self) -> tuple[int, str]:
        with urllib.request.urlopen(self.url, timeout=10) as response:
            return response.status, response.read().decode()

    def stop(self) -> str:
        self.proc.terminate()
        try:
            return self.proc.communicate(timeout=15)[1]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.communicate()[1]


def test_node_exporter_scrapes_one_file_per_job(any_env, tmp_path):
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    assert readme_job(any_env, tmp_path, textfiles, "sync-invoices", "exit 0").returncode == 0
    assert readme_job(any_env, tmp_path, textfiles, "nightly-dump", "exit 2").returncode == 2
    assert readme_job(any_env, tmp_path, textfiles, "sync-invoices", "exit 0").returncode == 0
    exporter = NodeExporter(textfiles)
    try:
        status, text = exporter.scrape()
        assert status == 200
        assert "node_textfile_scrape_error 0" in text, text
        ours = [s for s in series(text) if s.startswith("lockrun_")]
        assert len(ours) == len(set(ours)), sorted(s for s in ours if ours.count(s) > 1)
        assert 'lockrun_runs_total{name="sync-invoices",status="succeeded"}' in ours
        assert 'lockrun_runs_total{name="nightly-dump",status="failed"}' in ours
        assert re.search(r'^lockrun_runs_total\{name="sync-invoices",status="succeeded"\} 2$', text, re.M)
        assert len(re.findall(r"^node_textfile_mtime_seconds\{", text, re.M)) == 2
        # node_exporter counts a gathering error ("was collected before": a series two files hold)
        # in its next answer: none for lockrun's files.
        assert 'promhttp_metric_handler_errors_total{cause="gathering"} 0' in exporter.scrape()[1]
        # The check has teeth: a file repeating a series another holds is such an error.
        (textfiles / "dup.prom").write_text((textfiles / "lockrun-nightly-dump.prom").read_text())
        exporter.scrape()
        assert 'promhttp_metric_handler_errors_total{cause="gathering"} 1' in exporter.scrape()[1]
    finally:
        log = exporter.stop()
    assert "was collected before" in log, log


def test_concurrent_runs_never_leave_an_older_count(local_env, tmp_path):
    """Runs of one name ending together (-E 0: the busy ones count too): the ledger read and the
    rename are under one lock, so the file ends with every run, and its counter never goes back."""
    prom = tmp_path / "lockrun-race.prom"
    seen: list[int] = []
    done = threading.Event()

    def total() -> int | None:
        try:
            text = prom.read_text()
        except FileNotFoundError:
            return None
        assert text.endswith("\n") and text.startswith("# lockrun --metrics-file of: race\n"), text  # whole
        return sum(int(v) for v in re.findall(r'^lockrun_runs_total\{name="race",status="\w+"\} (\d+)$', text, re.M))

    def watch() -> None:
        while not done.is_set():
            count = total()
            if count is not None:
                seen.append(count)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for _ in range(3):
            procs = [spawn_lockrun(local_env, "-n", "race", "-E", "0", "--metrics-file", str(prom), "--",
                                   "sleep", "0.05") for _ in range(8)]
            assert [proc.wait(timeout=60) for proc in procs] == [0] * 8
    finally:
        done.set()
        watcher.join()
    assert total() == len(history(local_env)) == 24
    assert seen == sorted(seen), seen  # never backwards


def test_a_file_shared_by_jobs_keeps_each_jobs_series_once(local_env, tmp_path):
    """A config file's metrics_file names one file for every job: each run replaces its own name's
    series and keeps the others'; a file that is not lockrun's keeps nothing of what it held."""
    shared = tmp_path / "lockrun.prom"
    shared.write_text('lockrun_runs_total{name="ghost",status="succeeded"} 99\n')  # another program's
    config = tmp_path / "shared.toml"
    config.write_text(f'metrics_file = "{shared}"\n')
    env = {**local_env, "LOCKRUN_CONFIG": str(config)}
    for name, code in (("a", "0"), ("b", "3"), ("a", "0")):
        run_lockrun(env, "-n", name, "--", "sh", "-c", f"exit {code}")
    text = shared.read_text()
    assert text.startswith("# lockrun --metrics-file of: a b\n") and "ghost" not in text
    assert len(series(text)) == len(set(series(text)))
    assert 'lockrun_runs_total{name="a",status="succeeded"} 2' in text
    assert 'lockrun_runs_total{name="b",status="failed"} 1' in text
    assert promtool_check(text).returncode == 0


@pytest.mark.parametrize("given", ["", "DIR", "/dev/null", "MISSING/lockrun.prom", "LINK"])
def test_a_path_lockrun_could_not_write_is_refused_before_the_command_runs(local_env, tmp_path, given):
    marker = tmp_path / "ran"
    (tmp_path / "real.prom").write_text("")
    (tmp_path / "link.prom").symlink_to(tmp_path / "real.prom")  # replaced by a rename, never written through
    path = given.replace("DIR", str(tmp_path)).replace("MISSING", str(tmp_path / "no-such-dir"))
    path = path.replace("LINK", str(tmp_path / "link.prom"))
    result = run_lockrun(local_env, "-n", "m", "--metrics-file", path, "--", "touch", str(marker))
    assert_one_line(result, 2, "--metrics-file")
    assert not marker.exists() and Path("/dev/null").is_char_device()


def test_an_unwritable_directory_is_refused_before_the_command_runs(user, tmp_path):
    marker = user.home / "ran"
    result = user.run(user.cron, "-n", "m", "--metrics-file", str(tmp_path.parent / "lockrun-m.prom"), "--",
                      "touch", str(marker))
    assert_one_line(result, 2, "not writable by this user")
    assert not marker.exists()


def test_the_config_files_metrics_file_is_checked_too(local_env, tmp_path):
    config = tmp_path / "dir.toml"
    config.write_text(f'metrics_file = "{tmp_path}"\n')
    marker = tmp_path / "ran"
    result = run_lockrun({**local_env, "LOCKRUN_CONFIG": str(config)}, "-n", "m", "--", "touch", str(marker))
    assert_one_line(result, 78, str(config), "is a directory")
    assert not marker.exists()


def test_a_directory_still_locked_by_another_writer_is_a_warning_not_a_hang(local_env, tmp_path):
    import fcntl
    import os

    from lockrun.ledger import metrics

    folder = tmp_path / "locked"
    folder.mkdir()
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        started = time.monotonic()
        result = run_lockrun(local_env, "-n", "m", "--metrics-file", str(folder / "m.prom"), "--", "true")
        waited = time.monotonic() - started
    finally:
        os.close(fd)
    assert result.returncode == 0 and "cannot write the metrics file" in result.stderr, result.stderr
    assert "stayed locked" in result.stderr and waited >= metrics.LOCK_WAIT_S
    assert not (folder / "m.prom").exists()
