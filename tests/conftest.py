"""Fixtures: a real, disposable redis-server per test, and lockrun as a real subprocess.

Every server listens on a random loopback port and a unix socket in a private
temp dir, so tests can SIGKILL, SIGSTOP/SIGCONT and restart it, and many tests
can run side by side. The machine's own Redis is never touched.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

import pytest
import redis

REDIS_SERVER = shutil.which("redis-server")
LOCKRUN = str(Path(sys.executable).with_name("lockrun"))
if not os.path.exists(LOCKRUN):  # pragma: no cover - running from a checkout without the script
    LOCKRUN = None


def lockrun_argv(*args: str) -> list[str]:
    base = [LOCKRUN] if LOCKRUN else [sys.executable, "-m", "lockrun"]
    return [*base, *args]


def wait_until(predicate, timeout: float = 15.0, interval: float = 0.02, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self, password: str | None = None, tls: dict | None = None, args: tuple[str, ...] = ()) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="lr-redis-"))  # short: unix socket paths are limited
        self.socket = str(self.dir / "redis.sock")
        self.port = free_port()
        self.password = password
        self.tls = tls  # {"cert": ..., "key": ..., "ca": ...}: serve TLS on self.port
        self.args = list(args)  # more redis-server options, e.g. ("--replicaof", "127.0.0.1", "6379")
        self.proc: subprocess.Popen | None = None

    @property
    def tls_url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"unix://{auth}{self.socket}"

    @property
    def tcp_url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=self.socket, password=self.password, socket_timeout=5)

    def start(self) -> RedisServer:
        argv = [
            REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
            "--unixsocket", self.socket, "--unixsocketperm", "700",
            "--save", "", "--appendonly", "no", "--dir", str(self.dir),
        ]
        if self.password:
            argv += ["--requirepass", self.password]
        argv += self.args
        if self.tls:
            argv[argv.index("--port") + 1] = "0"
            argv += ["--tls-port", str(self.port), "--tls-cert-file", self.tls["cert"],
                     "--tls-key-file", self.tls["key"], "--tls-ca-cert-file", self.tls["ca"],
                     "--tls-auth-clients", "no"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"redis-server exited with {self.proc.returncode}")
            # A plain connect first: redis-py 5.0.0 (the oldest leg) leaves the socket of a refused connect
            # unclosed (a ResourceWarning, an error under this suite's filterwarnings).
            with socket.socket(socket.AF_UNIX) as probe:
                try:
                    probe.connect(self.socket)
                except OSError:
                    return False
            try:
                with self.client() as client:
                    return client.ping()
            except redis.RedisError:
                return False

        wait_until(ready, what="redis-server to answer PING")
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Stop the server with ``sig`` (SIGTERM: a clean shutdown) and wait for it, paused or not."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(sig)
            self.proc.wait()

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.kill()
        self.start()

    def cleanup(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def redis_server():
    if not REDIS_SERVER:
        pytest.fail("redis-server is not installed (apt-get install redis-server); .ci/run installs it")
    server = RedisServer().start()
    yield server
    server.cleanup()


def isolated_env(tmp_path) -> dict:
    """lockrun settings from this test only: its own state dir, an empty config, no inherited LOCKRUN_*."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOCKRUN_")}
    config = tmp_path / "config.toml"
    config.write_text("")
    base.update(
        HOME=str(tmp_path / "home"),
        LOCKRUN_STATE_DIR=str(tmp_path / "state"),
        LOCKRUN_CONFIG=str(config),
    )
    return base


@pytest.fixture
def env(tmp_path, redis_server):
    """An environment for lockrun subprocesses using this test's own Redis."""
    return {**isolated_env(tmp_path), "LOCKRUN_REDIS_URL": redis_server.url}


@pytest.fixture
def local_env(tmp_path):
    """An environment for lockrun subprocesses using the local backend (no Redis configured)."""
    return isolated_env(tmp_path)


@pytest.fixture(params=["redis", "local"])
def any_env(request, tmp_path):
    """The shared contract: tests that take this run once per backend."""
    if request.param == "redis":
        return request.getfixturevalue("env")
    return request.getfixturevalue("local_env")


def run_lockrun(env: dict, *args: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        lockrun_argv(*args), env=env, capture_output=True, text=True, timeout=timeout, **kwargs
    )


def spawn_lockrun(env: dict, *args: str, **kwargs) -> subprocess.Popen:
    """Start lockrun in the background; its output goes nowhere unless asked for."""
    kwargs.setdefault("stdout", subprocess.DEVNULL)
    kwargs.setdefault("stderr", subprocess.DEVNULL)
    return subprocess.Popen(lockrun_argv(*args), env=env, text=True, **kwargs)


def history(env: dict, *args: str, limit: int = 1000) -> list[dict]:
    result = run_lockrun(env, "history", "--json", "--limit", str(limit), *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def tcp_reply(port: int, *command, default=None):
    """One command to the redis-server on a loopback port, or ``default`` if it cannot answer (yet)."""
    try:
        with redis.Redis(port=port, socket_timeout=2, protocol=2) as client:
            return client.execute_command(*command)
    except redis.RedisError:
        return default


def stop_servers(procs: list[subprocess.Popen], folder: Path) -> None:
    """Kill the servers a fixture started and remove their directory."""
    for proc in procs:
        proc.kill()
        proc.wait()
    shutil.rmtree(folder, ignore_errors=True)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def in_pty(env, *args):
    """Start lockrun as a session leader with a pseudo-terminal as its controlling terminal."""
    master, slave = os.openpty()

    def take_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        lockrun_argv(*args), env=env, stdin=slave, stdout=slave, stderr=slave, preexec_fn=take_terminal
    )
    os.close(slave)
    return proc, master


def read_until(master, needle: bytes, timeout: float = 15.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"timed out waiting for {needle!r}; saw {seen!r}"
        ready, _, _ = select.select([master], [], [], left)
        if ready:
            try:
                chunk = os.read(master, 1024)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


def as_host(hostname: str, argv: list[str]) -> list[str]:
    """``argv`` run as if on another host: its own UTS namespace with its own host name (root only).

    lockrun reads the host name from uname(2), so this is what another machine would record.
    """
    return ["unshare", "--uts", "sh", "-c", 'hostname "$1" && shift && exec "$@"', "sh", hostname, *argv]


class Hosts:
    """Several "hosts" on one Redis URL: each with its own host name, state directory and ledger.

    ``hosts.run("app-b", "-n", "job", "--", ...)`` runs lockrun as host app-b and returns the
    CompletedProcess; ``hosts.spawn`` starts it in the background; ``hosts.env(name)`` is its environment.
    """

    def __init__(self, tmp_path: Path, url: str) -> None:
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            pytest.fail("the several-host tests need root and unshare(1) (util-linux) for a UTS namespace per host")
        self.tmp_path, self.url = tmp_path, url

    def env(self, hostname: str) -> dict:
        (self.tmp_path / hostname).mkdir(exist_ok=True)
        return {**isolated_env(self.tmp_path / hostname), "LOCKRUN_REDIS_URL": self.url}

    def run(self, hostname: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(as_host(hostname, lockrun_argv(*args)), env=self.env(hostname),
                              capture_output=True, text=True, timeout=timeout)

    def spawn(self, hostname: str, *args: str, **kwargs) -> subprocess.Popen:
        kwargs.setdefault("stdout", subprocess.DEVNULL)
        kwargs.setdefault("stderr", subprocess.DEVNULL)
        return subprocess.Popen(as_host(hostname, lockrun_argv(*args)), env=self.env(hostname), text=True, **kwargs)

    def json(self, hostname: str, *args: str):
        result = self.run(hostname, *args, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


@pytest.fixture
def hosts(tmp_path, redis_server) -> Hosts:
    """Two or more "hosts" on this test's own Redis."""
    return Hosts(tmp_path, redis_server.url)


def client_commands(server: RedisServer, argv: list[str], env: dict) -> list[str]:
    """The commands (names, upper case) that clients other than MONITOR sent while ``argv`` ran.

    Commands a Lua script ran are the server's, not round trips, and are left out.
    """
    seen: list[str] = []
    stopper = server.client()
    stopper.ping()  # connected (and its handshake done) before MONITOR starts watching
    with server.client().monitor() as monitor:
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, timeout=60)
        stopper.execute_command("PING", "stop-monitor")
        for event in monitor.listen():
            if event["command"] == "PING stop-monitor":
                break
            if event.get("client_type") == "lua" or "lua" in str(event.get("client_address", "")):
                continue
            seen.append(event["command"].split()[0].upper())
    return seen


# --- another user ------------------------------------------------------------------------------------

OTHER_UID = 1001  # another user: nobody with this uid runs anything here
TEST_UID = 4242  # a user the tests run lockrun as (tests/test_paths.py, tests/test_blind_spots.py)


@pytest.fixture
def user(tmp_path):
    """TEST_UID, with a passwd entry and a home of its own: ``argv(...)`` runs a command as that
    user, in a mount namespace where /etc/passwd has the entry. The user keeps CAP_DAC_READ_SEARCH
    only so that it can reach the test's interpreter (perhaps under /root) and config file; it
    cannot write anywhere but its home. The home is outside pytest's 0700 directories, since
    access(2), which lockrun asks whether it may write, checks without that capability."""
    top = Path(tempfile.mkdtemp(prefix="lockrun-user-"))
    os.chmod(top, 0o755)
    home = top / "home"
    home.mkdir()
    os.chown(home, TEST_UID, TEST_UID)
    passwd = tmp_path / "passwd"
    passwd.write_text(Path("/etc/passwd").read_text() + f"lockrun-test:x:{TEST_UID}:{TEST_UID}::{home}:/bin/sh\n")

    class User:
        def __init__(self) -> None:
            self.home = home
            base = {k: v for k, v in isolated_env(tmp_path).items() if k != "LOCKRUN_STATE_DIR"}
            self.cron = {**base, "HOME": str(home)}  # cron: HOME from the passwd entry, no XDG_STATE_HOME
            self.shell = {**self.cron, "XDG_STATE_HOME": str(home / "xdg-state")}  # a login shell that sets it
            self.cron.pop("XDG_STATE_HOME", None)

        @staticmethod
        def argv(*args: str, before: list[str] | tuple[str, ...] = ()) -> list[str]:
            """``before``: shell commands run as root in the mount namespace first (a mount)."""
            become = " && ".join(['mount --bind "$0" /etc/passwd', *before,
                                  f'exec setpriv --reuid {TEST_UID} --regid {TEST_UID} --clear-groups'
                                  ' --inh-caps +dac_read_search --ambient-caps +dac_read_search "$@"'])
            return ["unshare", "--mount", "sh", "-c", become, str(passwd), *lockrun_argv(*args)]

        def run(self, env: dict, *args: str, before: list[str] | tuple[str, ...] = ()) -> subprocess.CompletedProcess:
            return subprocess.run(self.argv(*args, before=before), env=env, capture_output=True, text=True,
                                  timeout=60)

        def spawn(self, env: dict, *args: str) -> subprocess.Popen:
            return subprocess.Popen(self.argv(*args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    yield User()
    shutil.rmtree(top, ignore_errors=True)


def assert_one_line(result, code: int, *needles: str) -> None:
    """A refusal as lockrun words every one: exit ``code``, one line on stderr, no traceback."""
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert result.stderr.startswith("lockrun: ") and result.stderr.count("\n") == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr
