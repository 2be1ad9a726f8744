"""Redis URLs as lockrun reads them: their forms, their checks, and how they are shown.

Beside the Redis backend, and stdlib only: the settings check a URL at parse time
without importing redis-py, and every message, ledger row and status line shows a
URL through :func:`redact_url` or :func:`url_without_credentials`, never as given.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import NamedTuple
from urllib.parse import SplitResult, parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from lockrun.core.defaults import MAX_SECONDS
from lockrun.core.errors import ConfigError, UsageError
from lockrun.core.printable import quoted

REDIS_SCHEMES = ("redis", "rediss", "unix")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")


def validate_redis_url(url: str, error: type[UsageError] | type[ConfigError] = UsageError) -> str:
    """Check the scheme and shape of a Redis URL; the message never shows a password."""
    rest = url.partition("://")[2]
    if "@" in rest and "@" not in _authority(rest):  # redis://:pa#ss@host: urlsplit would read host "" port "pa"
        raise error(f"invalid Redis URL {quoted(redact_url(url))}: an @ after a /, ? or # (a password with one"
                    " of them raw?): percent-encode them in the password (/ %2F, ? %3F, # %23, @ %40)")
    if url.split("://", 1)[0] in CLUSTER_SCHEMES + SENTINEL_SCHEMES:  # several host:port pairs
        try:
            parse_cluster_url(url)
        except ValueError as exc:
            raise error(f"invalid Redis URL {quoted(redact_url(url))}: {exc}") from None
        return url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise error(f"invalid Redis URL {quoted(redact_url(url))}: cannot parse it") from None
    problem = _shape_problem(parts) or _query_problem(parts)
    if problem is not None:
        raise error(f"invalid Redis URL {quoted(redact_url(url))}: {problem}")
    return url


def _shape_problem(parts: SplitResult) -> str | None:
    """What is wrong with a redis://, rediss:// or unix:// URL's scheme, numbers or socket path."""
    db_path = parts.path if parts.scheme != "unix" else ""
    number = _non_ascii_number(parts.netloc.rpartition("@")[2], db_path, parts.query)
    if number is not None:  # Python 3.10's urlsplit reads a port of other digits (٦٣٧٩) as a number
        return f"{number} must be written in ASCII digits"
    if db_path.strip("/") and int(db_path.strip("/")) > MAX_DB:
        return f"the database number must be from 0 to {MAX_DB}"
    if parts.scheme not in REDIS_SCHEMES:
        return "the scheme must be redis://, rediss://, unix://, redis+cluster:// or redis+sentinel://"
    if parts.scheme == "unix" and not parts.path:
        return "a unix:// URL needs a socket path"
    if parts.hostname and not _host_name_ok(parts.hostname):
        return f"the host name {quoted(parts.hostname)} is not one (an empty label, or one of more than 63 characters)"
    return None


def _host_name_ok(host: str) -> bool:
    """Whether the resolver could be asked for ``host`` (it is encoded as IDNA, label by label)."""
    try:
        host.encode("idna")
    except UnicodeError:
        return False
    return True


def _query_problem(parts: SplitResult) -> str | None:
    """The first query parameter the URL's scheme does not take, or whose value is out of its
    range, as a message."""
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    for key, value in pairs:
        problem = _pair_problem(parts.scheme, key, value)
        if problem is not None:
            return problem
    keys = [key for key, _ in pairs]
    twice = next((key for key in keys if keys.count(key) > 1), None)
    if twice is not None:  # redis-py takes the last, a reader the first
        return f"{twice} is given twice"
    if "ssl_keyfile" in keys and "ssl_certfile" not in keys:
        return "ssl_keyfile needs ssl_certfile (the certificate the key belongs to)"
    return None


def _pair_problem(scheme: str, key: str, value: str) -> str | None:
    allowed = URL_QUERY_PARAMETERS + (("socket_keepalive",) if scheme != "unix" else ())
    if key in TLS_QUERY_PARAMETERS and scheme != "rediss":
        return f"{key} applies to rediss:// (TLS) URLs only"
    if key not in allowed + TLS_QUERY_PARAMETERS:
        return f"unknown query parameter {quoted(key)} (known: {', '.join(allowed)}; with rediss://: ssl_*)"
    problem = _value_problem(key, value)
    return None if problem is None else f"{key}={quoted(value) if not _is_secret(key) else '***'}: {problem}"


#: The largest database number a Redis server can have (its ``databases`` is an int).
MAX_DB = 2**31 - 1
_BOOLEAN_WORDS = frozenset({"true", "false", "yes", "no", "1", "0", "t", "f", "y", "n", "on", "off"})


def _value_problem(key: str, value: str) -> str | None:
    """What is wrong with a query parameter's value (redis-py would read a bad one as something
    else: ``retry_on_timeout=maybe`` as true, ``socket_timeout=nan`` as no timeout); None if fine."""
    rule = _VALUE_RULES.get(key)
    return None if rule is None or rule[0](value) else rule[1]


def _whole(text: str, maximum: int, minimum: int = 0) -> bool:
    return _ascii_digits(text) and minimum <= int(text) <= maximum


def _seconds(text: str) -> bool:
    try:
        return 0 <= float(text) <= MAX_SECONDS and text.strip() == text
    except ValueError:
        return False


_FILE = "a file that exists on this host (a missing one would look like a server that is down: exit 69)"
_SECONDS = "a number of seconds, 0 or more (lockrun bounds every call itself)"
_TRUE_OR_FALSE = (lambda value: value.lower() in _BOOLEAN_WORDS, "true or false")
#: Per query parameter: whether a value is one, and what it must be.
_VALUE_RULES: dict[str, tuple[Callable[[str], bool], str]] = {
    "db": (lambda value: _whole(value, MAX_DB), f"a database number from 0 to {MAX_DB}"),
    "socket_timeout": (_seconds, _SECONDS),
    "socket_connect_timeout": (_seconds, _SECONDS),
    "health_check_interval": (lambda value: _whole(value, MAX_SECONDS), "a whole number of seconds (redis-py reads"
                                                                      " no other)"),
    "ssl_min_version": (lambda value: value in ("771", "772"), "771 (TLS 1.2) or 772 (TLS 1.3): ssl.TLSVersion's"
                                                              " numbers, the only form redis-py reads"),
    "ssl_ca_certs": (os.path.isfile, _FILE),
    "ssl_certfile": (os.path.isfile, _FILE),
    "ssl_keyfile": (os.path.isfile, _FILE),
    "ssl_ca_path": (os.path.isdir, "a directory that exists on this host"),
    "client_name": (lambda value: re.fullmatch(r"[!-~]+", value) is not None, "printable ASCII without spaces"
                                                                             " (Redis refuses them)"),
    "max_connections": (lambda value: _whole(value, 2**31, 1), "a whole number above 0"),
    "socket_read_size": (lambda value: _whole(value, 2**31, 1), "a whole number above 0"),
    "protocol": (lambda value: value in ("2", "3"), "2 or 3 (RESP2 or RESP3)"),
    "retry_on_timeout": _TRUE_OR_FALSE,
    "socket_keepalive": _TRUE_OR_FALSE,
    "ssl_check_hostname": _TRUE_OR_FALSE,
    "ssl_cert_reqs": (lambda value: value.lower() in ("none", "optional", "required"), "none, optional or required"),
}



def _ascii_digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _non_ascii_number(hostport: str, path: str, query: str) -> str | None:
    """Which number of a URL (its port, the database in its path or ``?db=``) is not ASCII digits."""
    port = hostport.rpartition("]")[2].rpartition(":")[2] if ":" in hostport.rpartition("]")[2] else ""
    if port and not _ascii_digits(port):
        return "the port"
    db = path.strip("/")
    if db and not _ascii_digits(db):
        return "the database number"
    if any(key == "db" and not _ascii_digits(value) for key, value in parse_qsl(query, keep_blank_values=True)):
        return "the database number"
    return None


#: The query parameters a redis:// or unix:// URL may carry (redis-py reads them; the
#: timeouts and retries lockrun sets itself win over the URL's).
URL_QUERY_PARAMETERS = (
    "db", "username", "password", "client_name", "socket_timeout", "socket_connect_timeout",
    "health_check_interval", "retry_on_timeout", "max_connections", "protocol", "socket_read_size",
)
#: ... and these only a rediss:// URL (anything else is refused before a client is built).
TLS_QUERY_PARAMETERS = (
    "ssl_ca_certs", "ssl_ca_path", "ssl_ca_data", "ssl_certfile", "ssl_keyfile", "ssl_password",
    "ssl_cert_reqs", "ssl_check_hostname", "ssl_min_version", "ssl_ciphers",
)


class ClusterURL(NamedTuple):
    nodes: list[tuple[str, int]]
    username: str | None
    password: str | None
    tls: bool
    service: str | None = None  # Sentinel: the monitored master's name
    db: int = 0


def parse_cluster_url(url: str) -> ClusterURL:
    """Several nodes in one URL.

    ``redis+cluster://[user:password@]h1:7000,h2:7001/``: startup nodes of a Redis Cluster;
    ``redis+sentinel://[user:password@]h1:26379,h2:26379/SERVICE[/DB]``: Sentinels and the
    name of the master they watch (the credentials are the master's).
    """
    scheme, _, rest = url.partition("://")
    rest, _, query = rest.split("#", 1)[0].partition("?")
    if query:  # read by nothing: a setting that seems taken but is not (a sentinel_password, say)
        raise ValueError(f"a {scheme}:// URL takes no query parameters (the password: in the URL before the"
                         " hosts, or redis_password_file)")
    netloc, _, path = rest.partition("/")
    service, db = _sentinel_master(path) if scheme in SENTINEL_SCHEMES else (None, 0)
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username, password = unquote(user) or None, unquote(secret) if colon else None
    nodes = [_node(item) for item in filter(None, hosts.split(","))]
    if not nodes:
        raise ValueError(f"a {scheme}:// URL needs at least one host:port")
    return ClusterURL(nodes, username, password, scheme.startswith("rediss"), service, db)


def _sentinel_master(path: str) -> tuple[str, int]:
    """The master's name and database in a redis+sentinel:// URL's path."""
    service, _, db_text = path.strip("/").partition("/")
    if not service:
        raise ValueError("a redis+sentinel:// URL names the master: redis+sentinel://h1:26379,h2:26379/mymaster/0")
    if db_text and (not _ascii_digits(db_text) or int(db_text) > MAX_DB):
        raise ValueError(f"the database after the master's name is a number from 0 to {MAX_DB}, not {quoted(db_text)}")
    return service, int(db_text or 0)


def _node(item: str) -> tuple[str, int]:
    host, colon, port = item.rpartition(":")
    bad_port = not _ascii_digits(port) or not 0 < int(port) < 65536
    if not colon or not host or bad_port or not _host_name_ok(host.strip("[]")):
        raise ValueError(f"cluster nodes are host:port pairs separated by commas, not {quoted(item)}")
    return host.strip("[]"), int(port)


def without_password(url: str) -> str:
    """The URL with its password removed (userinfo and ``?password=``), for the command's environment.

    A lockrun inside the command still finds the server; the password it needs comes
    from a password file (``redis_password_file``, ``LOCKRUN_REDIS_PASSWORD_FILE``).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    rest, hash_, fragment = rest.partition("#")
    rest, question, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    query = _without_password_pair(query)
    return (f"{scheme}://{_user_only(netloc)}{slash}{path}" + (f"?{query}" if query else "")
            + (f"#{fragment}" if hash_ else ""))


def _user_only(netloc: str) -> str:
    """``user@host`` for ``user:password@host``; ``host`` for ``:password@host``."""
    if "@" not in netloc:
        return netloc
    userinfo, _, hosts = netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return f"{user}@{hosts}" if user else hosts


def _without_password_pair(query: str) -> str:
    return "&".join(pair for pair in query.split("&") if not _is_secret(pair.split("=", 1)[0]))


def _is_secret(key: str) -> bool:
    """A query parameter that holds a secret: ``password``, ``ssl_password``, any ``*password*``."""
    return "password" in unquote(key).lower()


def environment_for_command(environ: Mapping[str, str]) -> dict[str, str]:
    """lockrun's environment minus its own secrets: what the command may inherit."""
    env = dict(environ)
    if env.get("LOCKRUN_REDIS_URL"):
        env["LOCKRUN_REDIS_URL"] = without_password(env["LOCKRUN_REDIS_URL"])
    return env


def url_without_credentials(url: str) -> str:
    """``redis://h:6379/0`` from ``redis://user:pw@h:6379/0?password=x``: where a server is,
    safe to store and show (no userinfo; of the query string only ``db``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "<unparseable URL>"
    rest, _, query = rest.split("#", 1)[0].partition("?")
    # Everything up to the last "@" goes: a password with an unescaped "/" must not survive.
    rest = rest.rpartition("@")[2]
    db = re.search(r"(?:^|&)db=(\d+)(?:&|$)", query)  # which database of a unix socket
    return f"{scheme}://{rest}" + (f"?db={db.group(1)}" if db else "")


def redact_url(url: str) -> str:
    """The URL with any password (userinfo, ``?password=``, ``?ssl_password=``) replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest and ":" in rest.rpartition("@")[0] and "@" not in _authority(rest):
        # A raw / ? or # in the password (redis://u:pa#ss@h/0): urlsplit would end the authority
        # inside it and show the rest. Everything up to the last @ is the userinfo then (a query
        # value with an @ is hidden with it: hiding too much beats showing a password).
        userinfo, _, after = rest.rpartition("@")
        return f"{scheme}://{userinfo.partition(':')[0]}:***@{redact_url(f'{scheme}://{after}')[len(scheme) + 3:]}"
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc, query = _netloc_redacted(parts.netloc), _query_redacted(parts.query)
    # Reassembled by hand: urlunsplit() would turn unix:///path into unix:/path.
    text = f"{parts.scheme}://{netloc}{parts.path}" if "//" in url[:len(parts.scheme) + 3] else urlunsplit(
        (parts.scheme, netloc, parts.path, "", "")
    )
    return text + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")


def _authority(rest: str) -> str:
    """What urlsplit takes for the authority of ``rest`` (after ``scheme://``): up to / ? or #."""
    ends = [i for i in (rest.find(c) for c in "/?#") if i >= 0]
    return rest[:min(ends, default=len(rest))]


def _netloc_redacted(netloc: str) -> str:
    if "@" not in netloc:
        return netloc
    userinfo, _, hostport = netloc.rpartition("@")
    user, has_password, _ = userinfo.partition(":")
    return f"{user}:***@{hostport}" if has_password else f"{userinfo}@{hostport}"


def _query_redacted(query: str) -> str:
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(_is_secret(key) for key, _ in pairs):
        return query
    return urlencode([(k, "***" if _is_secret(k) else v) for k, v in pairs], safe="*/:", quote_via=quote)
