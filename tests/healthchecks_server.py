"""A strict stand-in for the open-source healthchecks server's ping endpoints, written from its own
source and docs (github.com/healthchecks/healthchecks, main of August 2026), for
tests/test_clients.py. Each rule it enforces names where healthchecks has it:

- URLS (hc/api/urls.py): ``/ping/<uuid>`` and ``/ping/<uuid>/start|fail|log|<int:exitstatus>``;
  anything else is 404. A check that does not exist is 404 "not found" (views.ping).
- EXIT (views.ping): an exit status above 255 is 400 "invalid url format"; above 0 it is a "fail".
- RID (views.ping with hc/lib/string.py ``is_valid_uuid_string``, and docs "Measuring script run
  time": "The run IDs must be ... UUID values in the canonical textual representation"): a ``rid``
  that is not one is 400 "invalid uuid format" and the ping is NOT recorded.
- BODY (views.ping: ``body = request.body[: settings.PING_BODY_LIMIT]``; settings.py: default
  10000; docs "Pinging API": "The response may optionally contain a Ping-Body-Limit: <n> response
  header ... SITE_NAME will store the first 100 bytes and ignore the remaining 23"): only the
  first ``body_limit`` bytes are kept, and every answer says ``Ping-Body-Limit: <n>``.
- PAIRING (models.Check.ping): a "start" sets last_start and last_start_rid; a success or fail
  whose rid equals last_start_rid gets a duration and clears last_start; a fail, or a success
  without rid, clears last_start without a duration; a success with another rid leaves it.
- LOG (models.Check.ping): a "log" ping is recorded and changes nothing else.

It records what it kept (``pings``) and what it was sent (``received``), so a test can tell what
the server dropped from what the client sent.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

#: hc/lib/string.py (re.IGNORECASE there: the server takes upper case too; lockrun sends lower case).
UUID_RE = re.compile("^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
#: settings.py: PING_BODY_LIMIT = envint("PING_BODY_LIMIT", "10000")
DEFAULT_BODY_LIMIT = 10_000
_PATH = re.compile(r"^/ping/(?P<code>[0-9a-fA-F-]{36})(?:/(?P<action>start|fail|log|\d+))?/?$")


@dataclass
class Ping:
    kind: str  # "start", "success", "fail" or "log"
    rid: str | None
    body: bytes  # what the server kept
    exitstatus: int | None
    duration: float | None = None  # set when a start with the same rid was paired (PAIRING)


@dataclass
class Check:
    code: str
    pings: list[Ping] = field(default_factory=list)
    last_start: float | None = None
    last_start_rid: str | None = None


class HealthchecksServer:
    def __init__(self, body_limit: int | None = DEFAULT_BODY_LIMIT) -> None:
        self.body_limit = body_limit
        self.checks: dict[str, Check] = {}
        self.received: list[tuple[str, bytes, int]] = []  # (path, body as sent, the status answered)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                sent = self.rfile.read(length)
                status, text = server.handle(self.path, sent)
                with server._lock:
                    server.received.append((self.path, sent, status))
                payload = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                if status == 200 and server.body_limit is not None:
                    self.send_header("Ping-Body-Limit", str(server.body_limit))  # BODY
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_HEAD = _answer  # noqa: N815 - "HEAD, GET, and POST request methods"

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def new_check(self) -> str:
        """A check's ping URL (PING_ENDPOINT<uuid>)."""
        code = str(uuid.uuid4())
        self.checks[code] = Check(code)
        return f"{self.url}/ping/{code}"

    def pings(self, url: str) -> list[Ping]:
        return list(self.checks[url.rsplit("/", 1)[1]].pings)

    def handle(self, path: str, sent: bytes) -> tuple[int, str]:
        parts = urlsplit(path)
        match = _PATH.match(parts.path)
        if match is None:
            return 404, "not found"  # URLS
        with self._lock:
            check = self.checks.get(match["code"].lower())
            if check is None:
                return 404, "not found"  # URLS
            action, exitstatus = match["action"] or "success", None
            if action.isdigit():
                exitstatus = int(action)
                if exitstatus > 255:
                    return 400, "invalid url format"  # EXIT
                action = "fail" if exitstatus > 0 else "success"  # EXIT
            body = sent[: self.body_limit] if self.body_limit is not None else sent  # BODY
            rids = parse_qs(parts.query, keep_blank_values=True).get("rid")
            rid = rids[-1] if rids else None
            if rid is not None and not UUID_RE.match(rid):
                return 400, "invalid uuid format"  # RID: nothing recorded
            ping = Ping(action, rid.lower() if rid else None, body, exitstatus)
            now = time.monotonic()
            if action == "start":  # PAIRING
                check.last_start, check.last_start_rid = now, ping.rid
            elif action in ("success", "fail") and check.last_start is not None:
                if check.last_start_rid == ping.rid:
                    ping.duration = now - check.last_start
                    check.last_start = None
                elif action == "fail" or ping.rid is None:
                    check.last_start = None
            check.pings.append(ping)
        return 200, "OK"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
