"""Telling someone: webhooks after a run, healthchecks.io-style pings around it.

Everything sent after the release shares one deadline, DELIVERY_BUDGET seconds from the
moment the run ends (the start ping still in flight included): every endpoint is tried at
once, each in a thread of its own, with two attempts of at most ATTEMPT_TIMEOUT seconds each
within that deadline, and whatever has not answered by then is given up on, however many
endpoints there are and wherever they hang (DNS resolution, which no socket timeout bounds,
connecting, or an endpoint that accepts and never answers). So pings and webhooks together
delay lockrun's exit by at most the 5 s the README promises. A delivery never changes
lockrun's exit code, and a failure comes back as one line for a warning and the ledger's
note. Endpoints are shown as ``scheme://host/…``: a webhook's query string and a ping URL's
path are its credentials.

:class:`Delivery` is what one run asked for; the runner makes one only when a run asks,
and urllib is imported only when something is sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from lockrun import __version__
from lockrun.config.values import SLOW_EVENT, redact_endpoint
from lockrun.core.record import Status
from lockrun.run.outcome import busy_message

if TYPE_CHECKING:
    import urllib.request

    from lockrun.backends.values import Holder

ATTEMPT_TIMEOUT = 2.0
ATTEMPTS = 2
#: Seconds for everything sent after the run, all endpoints together: 5 s (docs/operating.md "Telling
#: someone") less the time lockrun takes to give up on threads still waiting and to exit.
DELIVERY_BUDGET = 4.0
RETRY_PAUSE = 0.2

USER_AGENT = f"lockrun/{__version__}"


def split_credentials(url: str) -> tuple[str, str | None]:
    """``http://user:pw@host/x`` -> (``http://host/x``, the Basic Authorization header value).

    urllib would hand ``user:pw@host`` to the resolver as a host name; the credentials go
    in a header instead, and never into a message, the ledger or a payload.
    """
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    import base64

    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")
    return parts._replace(netloc=hostport).geturl(), f"Basic {token}"


def post(url: str, body: bytes, content_type: str, deadline: float | None = None,
         answered: Callable[[Mapping[str, str]], None] | None = None) -> str | None:
    """POST with one retry before ``deadline`` (on the monotonic clock; default DELIVERY_BUDGET
    from now). None on success, else why it failed; ``answered`` gets a successful response's
    headers. A call that hangs past the deadline where no timeout reaches (DNS) is given up on by
    the caller: see :class:`Sending`."""
    import urllib.error  # here, not above: a run that sends nothing never pays for them
    import urllib.request

    if deadline is None:
        deadline = time.monotonic() + DELIVERY_BUDGET
    reason = "not attempted: no time left"
    target, authorization = split_credentials(url)
    for attempt in range(ATTEMPTS):
        left = deadline - time.monotonic()
        if left <= 0.05:
            break
        request = _request(target, body, content_type, authorization)
        try:
            with urllib.request.urlopen(request, timeout=min(ATTEMPT_TIMEOUT, left)) as response:
                response.read(65536)
                if answered is not None:
                    answered(response.headers)
                return None
        except urllib.error.HTTPError as exc:
            reason = f"HTTP {exc.code}"
            if exc.code < 500:  # the endpoint said no: asking again will not change its mind
                break
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = _reason(exc)
        if attempt + 1 < ATTEMPTS:
            time.sleep(min(RETRY_PAUSE, max(0.0, deadline - time.monotonic())))
    return f"{redact_endpoint(url)}: {reason}"


def _request(target: str, body: bytes, content_type: str, authorization: str | None) -> urllib.request.Request:
    import urllib.request

    request = urllib.request.Request(
        target, data=body, method="POST", headers={"Content-Type": content_type, "User-Agent": USER_AGENT}
    )
    if authorization:
        # Unredirected: a redirect to another host must not carry the credentials along.
        request.add_unredirected_header("Authorization", authorization)
    return request


def _reason(exc: Exception) -> str:
    """Why a POST got no answer, in a few words (no URL: it may carry credentials)."""
    inner = getattr(exc, "reason", exc)
    reason = type(inner).__name__ if isinstance(inner, BaseException) else str(inner)
    if isinstance(inner, OSError) and inner.strerror:
        reason = inner.strerror
    if "timed out" in str(inner):
        reason = "timed out"
    return reason


class Sending:
    """One delivery in a daemon thread of its own, so that waiting for it can stop at a deadline
    whatever it is stuck in; a thread still stuck then is left behind (lockrun is about to exit)."""

    def __init__(self, endpoint: str, send: Callable[[], str | None], what: str = "",
                 thread_name: str = "lockrun-deliver") -> None:
        self.endpoint = endpoint  # as messages show it: scheme://host/…
        self.failure: str | None = None
        self._done = threading.Event()

        def run() -> None:
            try:
                self.failure = send()
            except Exception as exc:  # noqa: BLE001 - said in one line: a traceback would print the URL's secrets
                self.failure = f"{endpoint}: {what + ' ' if what else ''}not sent ({type(exc).__name__})"
            finally:
                self._done.set()

        try:
            threading.Thread(target=run, name=thread_name, daemon=True).start()
        except RuntimeError as exc:  # no thread for it: a failed delivery, nothing worse
            self.failure = f"{endpoint}: {what + ' ' if what else ''}not sent ({exc})"
            self._done.set()

    def result(self, deadline: float) -> str | None:
        """Why it failed, None if it did not; waits until ``deadline`` at most."""
        if not self._done.wait(max(0.0, deadline - time.monotonic())):
            return f"{self.endpoint}: no answer in time"
        return self.failure


# -- webhooks -------------------------------------------------------------------------------


def webhook_payload(run: dict[str, Any], holder: dict[str, Any] | None, output_tail: str | None) -> dict[str, Any]:
    """The JSON document a webhook receives for one run outcome."""
    return {
        "name": run["name"],
        "status": run["status"],
        "exit_code": run["exit_code"],
        "signal": run["signal"],
        "exit_status": run["exit_status"],
        "host": run["host"],
        "run_id": run["run_id"],
        "started_at": run["started_at"],
        "ended_at": run["ended_at"],
        "duration_s": run["duration_s"],
        "waited_s": run["waited_s"],
        "fencing_token": run["fencing_token"],
        "command": run["command"],
        "error": run["error"],
        "note": run["note"],
        "holder": holder,
        "output_tail": output_tail,
        "lockrun_version": __version__,
        # --retry: the final attempt's number and the first attempt's run id (None without it)
        "attempt": run.get("attempt"),
        "first_run_id": run.get("first_run_id"),
    }


def slack_text(payload: dict[str, Any]) -> dict[str, str]:
    """A Slack-compatible ``{"text": ...}`` body (also understood by Mattermost and Rocket.Chat)."""
    icon = {Status.SUCCEEDED: ":white_check_mark:", Status.BUSY: ":hourglass:", Status.DUPLICATE: ":repeat:",
            SLOW_EVENT: ":turtle:"}.get(payload["status"], ":x:")
    text = f"{icon} lockrun: *{payload['name']}* {payload['status']} ({_how(payload)}) on {payload['host']}"
    if payload["duration_s"] is not None:
        text += f" after {payload['duration_s']:.1f}s"
    text += f", run {payload['run_id'][:8]}"
    holder = payload.get("holder")
    if holder:
        text += f"; held by {holder.get('host')}:{holder.get('pid')}"
    if payload["error"]:
        text += f"\n{payload['error']}"
    if payload["output_tail"]:
        text += "\n```" + payload["output_tail"][-2000:] + "```"
    return {"text": text}


def _how(payload: dict[str, Any]) -> str:
    """What cron saw first (exit 124 for a timeout), then how the command itself ended."""
    how = f"exit {payload['exit_status']}" if payload.get("exit_status") is not None else payload["status"]
    if payload["signal"] is not None:
        how += f", command killed by signal {payload['signal']}"
    elif payload["exit_code"] is not None and payload["exit_code"] != payload.get("exit_status"):
        how += f", command exited {payload['exit_code']}"
    return str(how)


def send_webhooks(urls: list[str], payload: dict[str, Any], slack: bool, deadline: float) -> list[Sending]:
    """Start delivering to every URL at once (so N endpoints cost one budget, not N)."""
    body = json.dumps(slack_text(payload) if slack else payload).encode()

    def sender(url: str) -> Callable[[], str | None]:
        return lambda: post(url, body, "application/json", deadline)

    return [Sending(redact_endpoint(url), sender(url)) for url in urls]


# -- pings (the healthchecks.io protocol) --------------------------------------------------------

#: How many bytes of a ping's body the server keeps when it does not say (its ``Ping-Body-Limit``
#: response header): the open-source healthchecks server's default (its PING_BODY_LIMIT setting),
#: which keeps the first 10,000 bytes and drops the rest.
DEFAULT_PING_BODY_LIMIT = 10_000
#: The largest ``Ping-Body-Limit`` believed: a larger number is read as this (the tail lockrun
#: keeps is at most 1 MiB: docs/reference.md "Ranges").
MAX_PING_BODY_LIMIT = 16 * 1024 * 1024


def body_limit_of(headers: Mapping[str, str]) -> int | None:
    """The ``Ping-Body-Limit`` a server's answer names (bytes of a body it keeps), or None when it
    names none a client can use (absent, not a whole number: the header is the server's word, read
    defensively)."""
    value = (headers.get("Ping-Body-Limit") or "").strip()
    if not value.isascii() or not value.isdigit() or len(value) > 12:
        return None
    return min(int(value), MAX_PING_BODY_LIMIT)


def fit_body(text: str, limit: int) -> bytes:
    """``text`` as a ping body the server keeps whole: a server keeps the first ``limit`` bytes
    of a body, and the end of a job's output is where its error is, so a longer text loses its
    beginning instead, and one first line says how much went (docs/operating.md "Telling someone")."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return data
    start = 0
    while True:  # the line names the number it cuts, so its length grows with it: a few rounds
        line = (f"[lockrun: the first {start} of {len(data)} bytes of this output were cut to fit the"
                f" server's Ping-Body-Limit of {limit} bytes]\n").encode()
        need = len(data) - max(0, limit - len(line))
        while need < len(data) and data[need] & 0xC0 == 0x80:  # never half a UTF-8 character
            need += 1
        if need <= start:
            break
        start = need
    return line + data[start:] if len(line) <= limit else line[:limit]


def ping_url(base: str, event: str, run_id: str) -> str:
    """``URL/start``, ``URL``, ``URL/<exit code>`` or ``URL/fail``, with ``?rid=RUN_ID``."""
    parts = urlsplit(base)
    path = parts.path.rstrip("/") + (f"/{event}" if event else "")
    query = (parts.query + "&" if parts.query else "") + f"rid={run_id}"
    return parts._replace(path=path, query=query).geturl()


def ping_event(status: str, exit_code: int | None, signal: int | None) -> str:
    """Which ping a final status sends: "" (success), an exit code, or "fail"."""
    if status in (Status.SUCCEEDED, Status.DUPLICATE, Status.PAUSED):  # a skip on purpose (lockrun pause) is no failure
        return ""
    if status == Status.FAILED and exit_code is not None:
        return str(exit_code)
    if status == Status.KILLED and signal is not None:
        return str(128 + signal)
    return "fail"


class StartPing:
    """The start ping, sent beside the command so a slow endpoint never delays it; it has
    DELIVERY_BUDGET from its start, and what is left of it at the run's end counts against the
    end's deadline like every other delivery. Its answer's ``Ping-Body-Limit`` says how much of
    a body the server keeps: the later pings of the run fit theirs to it."""

    def __init__(self, base: str, run_id: str) -> None:
        import urllib.request  # noqa: F401 - imported here, not in the thread: see Delivery.run_ended

        url = ping_url(base, "start", run_id)
        deadline = time.monotonic() + DELIVERY_BUDGET
        self.body_limit: int | None = None

        def answered(headers: Mapping[str, str]) -> None:
            self.body_limit = body_limit_of(headers)

        self.sending = Sending(redact_endpoint(base), lambda: post(url, b"", "text/plain", deadline, answered),
                               what="start ping", thread_name="lockrun-ping")

    def wait(self, deadline: float) -> str | None:
        return self.sending.result(deadline)


def send_ping(base: str, event: str, run_id: str, body: str | None, deadline: float | None = None,
              body_limit: int | None = None) -> str | None:
    """One ping, its body cut to what the server keeps (``body_limit``: the start ping's
    ``Ping-Body-Limit``; none known: DEFAULT_PING_BODY_LIMIT), keeping the end."""
    limit = DEFAULT_PING_BODY_LIMIT if body_limit is None else body_limit
    return post(ping_url(base, event, run_id), fit_body(body or "", limit), "text/plain; charset=utf-8", deadline)


#: What a webhook says of the holder that kept a run out: never its owner token, with which
#: anyone could delete the lock.
HOLDER_FIELDS_FOR_PAYLOAD = ("host", "pid", "run_id", "command", "started_at", "heartbeat_at", "ttl_remaining_s")


class Delivery:
    """What one run asked to tell (``--ping``, ``--notify``): the start ping beside the command,
    then, once the lock is released, the final ping and the webhooks."""

    def __init__(
        self,
        run_id: str,  # the first attempt's: the start ping and the end ping carry one rid
        *,
        ping_url: str | None = None,
        ping_on_busy: bool = False,
        notify_urls: tuple[str, ...] = (),
        notify_on: tuple[str, ...] = (),
        slack: bool = False,
    ) -> None:
        self.run_id = run_id
        self.ping_url, self.ping_on_busy = ping_url, ping_on_busy
        self.notify_urls, self.notify_on, self.slack = notify_urls, notify_on, slack
        self._start_ping: StartPing | None = None
        self._slow_sendings: list[Sending] = []  # --warn-after's, still in flight perhaps

    def command_started(self) -> None:
        """The start ping (``--ping``), sent beside the command."""
        if self.ping_url:
            self._start_ping = StartPing(self.ping_url, self.run_id)

    def command_slow(self, run: dict[str, Any], line: str) -> None:
        """``--warn-after``: the ``slow`` webhook (when ``--notify-on`` names it) and a ``URL/log``
        ping with ``line`` as its body, sent beside the command (never holding up the main loop);
        what is still in flight at the run's end counts against the end's deadline."""
        import urllib.request  # noqa: F401 - imported here, not in the thread: see run_ended

        deadline = time.monotonic() + DELIVERY_BUDGET
        if self.notify_urls and SLOW_EVENT in self.notify_on:
            payload = webhook_payload({**run, "status": SLOW_EVENT}, None, None)
            self._slow_sendings += send_webhooks(list(self.notify_urls), payload, self.slack, deadline)
        if self.ping_url:
            base, start = self.ping_url, self._start_ping
            self._slow_sendings.append(Sending(
                redact_endpoint(base), lambda: _ping_after_start(base, "log", self.run_id, line, deadline, start),
                what="log ping", thread_name="lockrun-ping"))

    def run_ended(
        self, run: dict[str, Any], holder: Holder | None = None, output_tail: str | None = None
    ) -> str | None:
        """The final ping and the webhooks for ``run``, the run's final row (``holder``: who kept
        it out), all at once and within one deadline. Returns what failed, the start ping
        included, as one line; None if nothing did."""
        # urllib's modules are imported here, in the main thread: a thread left behind at the
        # deadline must not hold the import lock while the interpreter exits.
        import urllib.request  # noqa: F401

        deadline = time.monotonic() + DELIVERY_BUDGET
        sendings = self._end_webhooks(run, holder, output_tail, deadline)  # started first, as they take longest
        sendings += self._end_ping(run, holder, output_tail, deadline)
        sendings += self._slow_sendings
        return _failures([sending.result(deadline) for sending in sendings])

    def _end_webhooks(
        self, run: dict[str, Any], holder: Holder | None, output_tail: str | None, deadline: float,
    ) -> list[Sending]:
        if not self.notify_urls or run["status"] not in self.notify_on:
            return []
        about_holder = None
        if holder is not None:
            about_holder = {k: v for k, v in holder._asdict().items() if k in HOLDER_FIELDS_FOR_PAYLOAD}
        payload = webhook_payload(run, about_holder, output_tail)
        return send_webhooks(list(self.notify_urls), payload, self.slack, deadline)

    def _end_ping(
        self, run: dict[str, Any], holder: Holder | None, output_tail: str | None, deadline: float,
    ) -> list[Sending]:
        """The end ping (a busy run's only with ``--ping-on-busy``); without one, the start ping
        is still waited for."""
        if self.ping_url and (run["status"] != Status.BUSY or self.ping_on_busy):
            body = output_tail or (busy_message(holder) if holder else run["error"]) or ""
            event = ping_event(run["status"], run["exit_code"], run["signal"])
            base, start = self.ping_url, self._start_ping
            return [Sending(redact_endpoint(base),
                            lambda: _ping_after_start(base, event, self.run_id, body, deadline, start))]
        return [self._start_ping.sending] if self._start_ping is not None else []


def _ping_after_start(
    base: str, event: str, run_id: str, body: str, deadline: float, start: StartPing | None,
) -> str | None:
    """A ping after the start ping (healthchecks pairs them by rid, in order, with the runs it
    shows), but never without one full attempt of its own: a missing end ping is what alerts."""
    failures = [start.wait(deadline - ATTEMPT_TIMEOUT)] if start is not None else []
    failures.append(send_ping(base, event, run_id, body, deadline, start.body_limit if start is not None else None))
    return _failures(failures)


def _failures(failures: list[str | None]) -> str | None:
    """What failed, as one line; None if nothing did."""
    return "; ".join(failure for failure in failures if failure) or None
