"""Redis as teams deploy it: TLS with verification, ACL users, unix sockets."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import RedisServer, history, run_lockrun

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make test certificates")


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(folder, name):
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=folder)
    return folder / f"{name}.pem"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pki")
    ca = make_ca(folder, "test-ca")
    other_ca = make_ca(folder, "other-ca")
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
             "-out", "server.csr", cwd=folder)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "test-ca.pem", "-CAkey", "test-ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "san.cnf", "-out", "server.pem", cwd=folder)
    return {"cert": str(folder / "server.pem"), "key": str(folder / "server.key"), "ca": str(ca),
            "other_ca": str(other_ca)}


@pytest.fixture
def tls_server(certificates):
    server = RedisServer(tls={k: certificates[k] for k in ("cert", "key", "ca")}).start()
    yield server
    server.cleanup()


def test_tls_with_the_right_ca_works(env, tls_server, certificates):
    env["LOCKRUN_REDIS_URL"] = tls_server.tls_url
    result = run_lockrun(env, "--redis-ca", certificates["ca"], "-n", "tls", "--", "echo", "over tls")
    assert (result.returncode, result.stdout, result.stderr) == (0, "over tls\n", "")
    env["LOCKRUN_REDIS_CA"] = certificates["ca"]
    assert run_lockrun(env, "status", "--json").returncode == 0
    url_form = run_lockrun({**env, "LOCKRUN_REDIS_CA": ""}, "--redis-url",
                           f"{tls_server.tls_url}?ssl_ca_certs={certificates['ca']}", "-n", "tls", "--", "true")
    assert url_form.returncode == 0, url_form.stderr


def test_every_fresh_tls_connection_is_taken_however_soon_the_servers_session_tickets_come(tls_server, certificates):
    """redis-py 8.2's hiredis parser took the TLS 1.3 session tickets a server sends right after the
    handshake for a reply nobody asked for, and refused about one new connection in five ("Connection
    not ready", exit 69): lockrun's client reads TLS with the Python parser (backends/redis/client.py)."""
    from lockrun.backends.redis.client import RedisConnection

    refused = []
    for _ in range(60):
        connection = RedisConnection(tls_server.tls_url, "lockrun:", 5.0, ca=certificates["ca"])
        try:
            connection.call(connection.client.ping)
        except Exception as exc:  # noqa: BLE001 - every refusal is counted and shown
            refused.append(str(exc))
        finally:
            RedisConnection.close(connection.client)
    assert refused == []


def test_tls_verification_is_on_by_default(env, tls_server, certificates):
    env["LOCKRUN_REDIS_URL"] = tls_server.tls_url
    for extra in ([], ["--redis-ca", certificates["other_ca"]]):  # the system's CAs, then a wrong one
        result = run_lockrun(env, *extra, "-n", "tls", "--", "touch", "/nonexistent-should-not-run")
        assert result.returncode == 69, result.stderr
        assert result.stderr.count("\n") == 1 and "certificate" in result.stderr.lower()


def test_tls_from_the_config_file(env, tls_server, certificates, tmp_path):
    config = tmp_path / "tls.toml"
    config.write_text(f'redis_url = "{tls_server.tls_url}"\nredis_ca = "{certificates["ca"]}"\n')
    env.pop("LOCKRUN_REDIS_URL")
    env["LOCKRUN_CONFIG"] = str(config)
    assert run_lockrun(env, "-n", "cfg", "--", "true").returncode == 0
    assert history(env, "cfg")[0]["backend"] == "redis"


def test_acl_user_and_password(env, redis_server):
    secret = "acl-Pa55word"
    redis_server.client().execute_command("ACL", "SETUSER", "lockrun", "on", f">{secret}", "~*", "&*", "+@all")
    env["LOCKRUN_REDIS_URL"] = f"redis://lockrun:{secret}@127.0.0.1:{redis_server.port}/0"
    assert run_lockrun(env, "-n", "acl", "--", "true").returncode == 0
    env["LOCKRUN_REDIS_URL"] = f"redis://lockrun:wrong-{secret}@127.0.0.1:{redis_server.port}/0"
    wrong = run_lockrun(env, "-n", "acl", "--", "true")
    assert wrong.returncode == 69 and secret not in wrong.stderr and "lockrun:***@" in wrong.stderr


def test_unix_socket_url_with_a_database(env, redis_server):
    env["LOCKRUN_REDIS_URL"] = f"unix://{redis_server.socket}?db=3"
    assert run_lockrun(env, "-n", "db3", "--", "true").returncode == 0
    flag_env = dict(env)
    assert run_lockrun(flag_env, "status", "--json").returncode == 0
    import redis

    db3 = redis.Redis(unix_socket_path=redis_server.socket, db=3)
    assert db3.get("lockrun:{db3}:fence") is not None
    assert redis_server.client().get("lockrun:{db3}:fence") is None  # not in db 0
