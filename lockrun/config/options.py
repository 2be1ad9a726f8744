"""One table of every setting (docs/reference.md "Every setting"): each row an option's flags, its
parser (with its range; the parsers are in parsers.py), environment variable, config key, default
and help. The click options of ``run`` and of every command, the config file's validation,
``--help``, the man page and the reference table are all made from these rows (cli/options.py,
config/file.py, scripts/gen_reference.py); ``resolve.py`` applies flag > environment >
``[job.NAME]`` > the file's top level > default to them, once, into a
:class:`~lockrun.config.resolve.Plan`.

Adding a run option is one row here, and its behaviour where the run reads ``plan[ROW]``.

A row's scope says where it may be set:

- ``RUN``: a flag of ``run`` (and ``config``), a key of the file's top level and of ``[job.NAME]``;
- ``GLOBAL``: a flag of every command, a key of the top level only (one backend, one ledger);
- ``FILE``: a key of the top level only, and an environment variable where it has one.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from lockrun.config import values
from lockrun.config.parsers import (
    REPLICAS_RULE,
    SUCCESS_CODES,
    SWITCH,
    URLS,
    ZONE_NAME,
    Parse,
    choice,
    from_text,
    redact_entries,
    seconds,
    text,
    whole,
)
from lockrun.core import defaults
from lockrun.core.redis_url import redact_url, validate_redis_url

T = TypeVar("T")

RUN, GLOBAL, FILE = "run", "global", "file"


class Option(Generic[T]):
    """One row of the table (a plain class: rows are made at import, on every run's path)."""

    __slots__ = ("key", "flags", "parse", "default", "help", "env", "metavar", "scope", "sets", "choices",
                 "shown_default", "repeatable", "adds")

    def __init__(
        self, key: str, parse: Parse[T], default: T, help: str, *, flags: tuple[str, ...] = (),
        env: str | None = None, metavar: str | None = None, scope: str = RUN, sets: T | None = None,
        choices: tuple[str, ...] = (), shown_default: str | None = None, repeatable: bool = False,
        adds: bool = False,
    ) -> None:
        self.key = key  # the config key, and the name the plan and the JSON of `lockrun config` use
        self.parse = parse
        self.default = default
        self.help = help
        self.flags = flags  # none: a config file key (and an environment variable) only
        self.env = env
        self.metavar = metavar or ("|".join(choices) if choices else None)
        self.scope = scope
        self.sets = sets  # a flag that takes no value sets this one (--syslog: True, --no-tail: False)
        self.choices = choices  # offered by completion; parse checks them
        self.shown_default = shown_default  # how --help and the reference say the default, if not str(default)
        self.repeatable = repeatable  # the flag may be given more than once (a tuple of values)
        self.adds = adds  # a [job.NAME] table's list is added to the top level's, not put in its place

    def __repr__(self) -> str:
        return f"Option({self.key!r})"

    @property
    def expected(self) -> str:
        """What a value must be, as a config file's error line and the reference table say it."""
        return self.parse.expected

    @property
    def flag(self) -> str | None:
        """The long flag (``--ttl``), as messages name the option."""
        return self.flags[-1] if self.flags else None

    @property
    def default_text(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        if self.default is None or self.default == ():
            return "none"
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        if isinstance(self.default, float):
            return values.span_text(self.default)
        return str(self.default)


def _range(minimum: float = 0.0, allow_zero: bool = False, maximum: float = defaults.MAX_SECONDS) -> str:
    return values.seconds_range(minimum, allow_zero, maximum)


# --- the table -------------------------------------------------------------------------------

# The lock and the lease
NAME: Option[str | None] = Option(
    "name", from_text(lambda value, what: values.validate_name(value), values.NAME_RULE), None,
    "Lock name.", flags=("-n", "--name"), metavar="NAME",
    shown_default="cmd- + 12 hex of sha256 of the argv joined by NUL")
TTL = Option(
    "ttl", seconds(1.0), float(defaults.DEFAULT_TTL),
    f"Lease length ({_range(1)}): seconds (90) or with a unit (90s, 2m, 1.5h, 7d), as every time value takes;"
    " renewed every TTL/3.", flags=("--ttl",), env="LOCKRUN_TTL", metavar="DURATION", shown_default="60")
WAIT: Option[float | None] = Option(
    "wait", seconds(allow_zero=True), None,
    f"Wait up to DURATION ({_range(allow_zero=True)}: 600, 10m) for a busy lock; a release wakes waiters at once.",
    flags=("-w", "--wait"), metavar="DURATION", shown_default="0 (give up at once); with --replace, the holder's"
    " TTL + --kill-after")
TIMEOUT: Option[float | None] = Option(
    "timeout", seconds(), None, f"Stop the command after DURATION ({_range()}: 3600, 1h); exit 124.",
    flags=("--timeout",), metavar="DURATION")
KILL_AFTER = Option(
    "kill_after", seconds(), float(defaults.DEFAULT_KILL_AFTER),
    f"Grace ({_range()}: 10, 30s) between SIGTERM and SIGKILL when stopping the command, also after a"
    " SIGTERM, SIGINT or SIGHUP forwarded to it.", flags=("--kill-after",), metavar="DURATION")
ON_LOST = Option(
    "on_lost", choice("terminate", "continue"), "terminate",
    "What to do when the lease cannot be kept (a --replace by another run always stops the command).",
    flags=("--on-lost",), choices=("terminate", "continue"))
BUSY_EXIT_CODE = Option(
    "busy_exit_code", whole(0, 255), defaults.DEFAULT_BUSY_EXIT, "Exit code (0 to 255) when the lock is busy"
    " (after --wait).", flags=("-E", "--busy-exit-code"), metavar="N")
SLOTS = Option(
    "slots", whole(1, defaults.MAX_SLOTS), 1,
    f"Allow up to N (1 to {defaults.MAX_SLOTS}) holders of the name at once across hosts (a semaphore); each"
    " holder has its own token and fencing token. Every caller of one name must use the same N.",
    flags=("--slots",), metavar="N")
MIN_HOLD: Option[float | None] = Option(
    "min_hold", from_text(values.parse_min_hold, f"a duration, {_range()}", numbers=True), None,
    f"Keep the lock taken until at least DURATION (30, 5m; at most {defaults.MAX_MIN_HOLD_TEXT}) after"
    " acquisition, so a host whose clock lags cannot rerun a short job; status shows such a lock as cooling.",
    flags=("--min-hold",), metavar="DURATION")
REPLACE = Option(
    "replace", SWITCH, False, "Ask the current holder to stop (it exits 76 with ledger status preempted), wait for"
    " its release, then run; never two at once.", flags=("--replace",), sets=True)
REPLICAS: Option[int | str] = Option(
    "replicas", REPLICAS_RULE, 0,
    "WAIT for N Redis replicas (all: every replica in sync with the master) behind the acquire and every"
    " renewal, in the same round trip; fewer acknowledgements at acquire: exit 69, the command does not run; a"
    " renewal counts only when acknowledged. N: 0 to 100.", flags=("--replicas",), metavar="N|all")
ALLOW_EVICTION = Option(
    "allow_eviction", SWITCH, False, "Run even on a Redis whose maxmemory-policy may evict keys (else exit 69):"
    " a held lock or a --once mark could vanish and the job run twice.", flags=("--allow-eviction",), sets=True)

# Once, and how often
ONCE: Option[str | None] = Option(
    "once", text("a key"), None, "Idempotency key, expanded with strftime in --tz (report-%Y-%m-%d): skip (exit 0)"
    " if it already succeeded. In a crontab, write % as \\%.", flags=("--once",), metavar="KEY")
ONCE_PER: Option[str | None] = Option(
    "once_per", choice("hour", "day", "week", "month"), None,
    "Run at most once per hour, day, ISO week or month (in --tz): --once with the period's start as the key"
    " (2026-12-01T14, 2026-12-01, 2026-W49, 2026-12); no % for cron to mangle. Not with --once.",
    flags=("--once-per",), metavar="hour|day|week|month", choices=("hour", "day", "week", "month"))
ONCE_EVERY: Option[float | None] = Option(
    "once_every", seconds(1.0), None,
    f"Run only if the name's last success started at least DURATION ({_range(1)}: 20h, 7d) ago, on any host"
    " (the Redis server's clock; the local backend: this host's); else skip, exit 0, status duplicate. With a"
    " frequent schedule it catches up what a down host missed.", flags=("--once-every",), metavar="DURATION")
REMEMBER = Option(
    "remember", seconds(maximum=defaults.MAX_DURATION_S), defaults.DEFAULT_REMEMBER_S,
    f"How long a succeeded --once key is kept (30d, 12h; at most {defaults.MAX_DURATION_TEXT}).",
    flags=("--remember",), metavar="DURATION")
TIMEZONE: Option[str | None] = Option(
    "timezone", ZONE_NAME, None, "The time zone (IANA name: UTC, Europe/Berlin) of --once-per periods and --once %"
    " keys; every run of one name must use the same.", flags=("--tz",), env="LOCKRUN_TZ", metavar="ZONE",
    shown_default="this host's local zone")

# Retries
RETRY = Option(
    "retry", whole(0, defaults.MAX_RETRIES), 0,
    f"Run a failed attempt (failed, timeout, or killed by a signal lockrun did not forward) again, up to N more"
    f" times (0 to {defaults.MAX_RETRIES}), under the same lock and fencing token; never after busy, duplicate,"
    " lost, preempted, unavailable, a forwarded signal, 126 or 127. Each attempt is its own ledger row.",
    flags=("--retry",), metavar="N")
RETRY_DELAY = Option(
    "retry_delay", seconds(allow_zero=True, maximum=defaults.MAX_RETRY_DELAY_S), defaults.DEFAULT_RETRY_DELAY_S,
    "The pause before the first retry (0 to 24h); each further one doubles, up to 10m, with up to 10% random"
    " spread; the lease is renewed through it.", flags=("--retry-delay",), metavar="DURATION")
JITTER = Option(
    "jitter", seconds(allow_zero=True, maximum=defaults.MAX_JITTER_S), 0.0,
    "Sleep a random time in [0, DURATION) (at most 24h) before the first try for the lock, so that a crontab"
    " shared by many hosts does not start all at once; --wait counts from after it.", flags=("--jitter",),
    metavar="DURATION", shown_default="none")
SUCCESS_EXIT: Option[tuple[int, ...]] = Option(
    "success_exit", SUCCESS_CODES, (),
    f"Exit codes (1 to 255, comma-separated, at most {defaults.MAX_SUCCESS_EXITS}) that count as success, like"
    " rsync's 24: recorded succeeded with the command's exit_code, --once marked done; lockrun exits 0.",
    flags=("--success-exit",), metavar="CODES")

# Telling someone
METRICS_FILE: Option[str | None] = Option(
    "metrics_file", from_text(values.check_metrics_path, "a path lockrun can write: a regular file in a"
                              " writable directory"), None,
    "Rewrite this Prometheus textfile (as `lockrun metrics` prints it) after the run; only a regular file is"
    " replaced (a device, FIFO or socket there: exit 2).", flags=("--metrics-file",), metavar="PATH")
NOTIFY_URLS: Option[tuple[str, ...]] = Option(
    "notify_urls", URLS, (), "POST a JSON document about the outcome to URL (repeatable).", flags=("--notify",),
    metavar="URL", repeatable=True)
NOTIFY_ON: Option[tuple[str, ...]] = Option(
    "notify_on", from_text(values.parse_notify_statuses, "ledger statuses, comma-separated"),
    values.DEFAULT_NOTIFY_ON, "Which outcomes --notify reports (comma-separated ledger statuses, and slow).",
    flags=("--notify-on",), metavar="STATUSES", shown_default=",".join(values.DEFAULT_NOTIFY_ON))
NOTIFY_FORMAT = Option(
    "notify_format", choice("json", "slack"), "json",
    "slack: a {\"text\": ...} body for Slack-compatible incoming webhooks.", flags=("--notify-format",),
    choices=("json", "slack"))
PING: Option[str | None] = Option(
    "ping", from_text(values.validate_http_url, "an http:// or https:// URL", hides=values.redact_endpoint), None,
    "healthchecks.io-style pings: URL/start, then URL (success), URL/EXIT_CODE or URL/fail.", flags=("--ping",),
    metavar="URL")
PING_ON_BUSY = Option(
    "ping_on_busy", SWITCH, False, "A busy skip pings URL/fail (by default it pings nothing).",
    flags=("--ping-on-busy",), sets=True)
SYSLOG = Option(
    "syslog", SWITCH, False, "One line per finished run to syslog (facility cron, lockrun[PID]:), key=value"
    " fields.", flags=("--syslog",), sets=True)
WARN_AFTER: Option[float | None] = Option(
    "warn_after", seconds(defaults.MIN_WARN_AFTER_S, maximum=defaults.MAX_WARN_AFTER_S), None,
    "A command still running after DURATION (1s to 30d: 90, 10m, 2h) is slow: one line on stderr, a `slow`"
    " webhook (--notify-on), a /log ping, `slow` in status, a note on its row and lockrun_slow_runs_total; it is"
    " not stopped.", flags=("--warn-after",), metavar="DURATION")

# Output
CAPTURE_TAIL: Option[int | None] = Option(
    "capture_tail", from_text(values.parse_size, "a size like 512, 10k or 1m", numbers=True), None,
    "Keep the last SIZE (512, 10k, 1m) of the command's output for the ledger, pings and webhooks.",
    flags=("--capture-tail",), metavar="SIZE")
OUTPUT_TAIL = Option(
    "output_tail", SWITCH, True,
    f"--no-tail: keep no output at all; by default, when lockrun's output is not a terminal, a failed run keeps"
    f" the last {defaults.DEFAULT_FAILURE_TAIL_TEXT} of it in this host's ledger.", flags=("--no-tail",),
    sets=False)
OUTPUT = Option(
    "output", choice(*values.OUTPUT_MODES), "always",
    "on-failure: keep the command's stdout and stderr in a private temporary file and write them out only when"
    " the run did not succeed, as chronic(1) does; not with --keep-detached.", flags=("--output",),
    choices=values.OUTPUT_MODES)
KEEP_DETACHED = Option(
    "keep_detached", SWITCH, False,
    "Let processes that leave the command's process group (setsid, double forks, daemons) run on after the run:"
    " they are not stopped, and outlive the lock's protection. By default everything the command started is"
    " stopped, and reaped, before the lock is released.", flags=("--keep-detached",), sets=True)
# What the recorded command line hides (docs/fleet.md "What is published"): config keys only.
REDACT: Option[tuple[str, ...]] = Option(
    "redact", Parse(redact_entries, "a list of strings (see docs/fleet.md \"What is published\")"), (),
    "More of the command line to mask wherever it is recorded: options whose value is masked (\"--api-key\"),"
    " names that name a secret (\"DB_CRED\"), or \"re:\" and a regular expression; a [job.NAME] table's"
    " rules add to the top level's.", adds=True)
RECORD_COMMAND = Option(
    "record_command", SWITCH, True, "false: record the program's name only, not its arguments.")
VERBOSE = Option("verbose", SWITCH, False, "Say what lockrun does (on stderr).", flags=("-v", "--verbose"),
                 sets=True)
QUIET = Option("quiet", SWITCH, False, "Only errors; no warnings.", flags=("-q", "--quiet"), sets=True)

# The cadence the job declares (docs/operating.md "Declaring a cadence")
EVERY: Option[float | None] = Option(
    "every", seconds(), None, f"Declare that the job should start every DURATION ({_range()}: 1h, 15m); status"
    " --all and lockrun check call it overdue when it does not. Not with --schedule.", flags=("--every",),
    metavar="DURATION")
SCHEDULE: Option[str | None] = Option(
    "schedule", from_text(values.parse_schedule, "a 5-field cron expression"), None,
    "Declare the job's cron schedule (5 fields: '0 3 * * *'), evaluated in --tz; status --all and lockrun check"
    " call it overdue when a start is missed. Not with --every.", flags=("--schedule",), metavar="'CRON'")
GRACE: Option[float | None] = Option(
    "grace", seconds(allow_zero=True), None,
    f"How late a declared start may be before it is overdue ({_range(allow_zero=True)}).", flags=("--grace",),
    metavar="DURATION", shown_default=defaults.DEFAULT_GRACE_TEXT)

# Where: the backend and the ledger, for every command
CONFIG: Option[str | None] = Option(
    "config", text("a path"), None, "TOML config file.", flags=("--config",), env="LOCKRUN_CONFIG",
    metavar="PATH", scope=GLOBAL,
    shown_default="the first of /etc/lockrun.toml and ~/.config/lockrun/config.toml that exists")
REDIS_URL: Option[str | None] = Option(
    "redis_url", from_text(lambda value, what: validate_redis_url(value), "a Redis URL", hides=redact_url), None,
    "redis://, rediss://, unix://, redis+cluster://h1:7000,h2:7001/ or redis+sentinel://h1:26379,h2:26379/mymaster"
    " URL of the shared lock server.", flags=("--redis-url",), env="LOCKRUN_REDIS_URL", metavar="URL",
    scope=GLOBAL, shown_default="none: the local backend")
REDIS_CA: Option[str | None] = Option(
    "redis_ca", from_text(values.existing_file, "the path of a file that exists"), None,
    "CA certificates (PEM) that verify a rediss:// server.",
    flags=("--redis-ca",), env="LOCKRUN_REDIS_CA", metavar="PATH", scope=GLOBAL, shown_default="the system's")
PREFIX = Option(
    "prefix", text("a string"), defaults.DEFAULT_PREFIX, "Namespace of every Redis key.", flags=("--prefix",),
    env="LOCKRUN_PREFIX", metavar="P", scope=GLOBAL)
LEDGER: Option[str | None] = Option(
    "ledger", from_text(lambda value, what: values.check_output_path(value, what, directories=True), "a path"), None,
    "SQLite run ledger.", flags=("--ledger",), env="LOCKRUN_LEDGER", metavar="PATH", scope=GLOBAL,
    shown_default="$LOCKRUN_STATE_DIR/ledger.db")
STATE_DIR: Option[str | None] = Option(
    "state_dir", text("a path"), None, "Where the ledger and the local backend's locks live.",
    env="LOCKRUN_STATE_DIR", scope=FILE, shown_default="/var/lib/lockrun for root, else ~/.local/state/lockrun")
REDIS_PASSWORD_FILE: Option[str | None] = Option(
    "redis_password_file", text("a path"), None, "A file whose first line is the Redis password.",
    env="LOCKRUN_REDIS_PASSWORD_FILE", scope=FILE)
LEDGER_KEEP_DAYS: Option[int | None] = Option(
    "ledger_keep_days", whole(1, defaults.MAX_KEEP_DAYS, "days"), None,
    "Prune finished runs older than this many days, now and then.", scope=FILE)
SOCKET_TIMEOUT: Option[float | None] = Option(
    "socket_timeout", seconds(maximum=defaults.MAX_CALL_TIMEOUT_S), None,
    "The bound on one Redis call (a run caps it at TTL/3).", scope=FILE, shown_default="TTL/5, 50 ms to 5 s")
CONNECT_TIMEOUT: Option[float | None] = Option(
    "connect_timeout", seconds(maximum=defaults.MAX_CALL_TIMEOUT_S), None,
    "The bound on connecting to Redis (a run caps it at TTL/3).", scope=FILE, shown_default="TTL/5, 50 ms to 5 s")
FLEET_KEEP_RUNS = Option(
    "fleet_keep_runs", whole(1, defaults.MAX_FLEET_KEEP_RUNS, "runs"), defaults.DEFAULT_FLEET_KEEP_RUNS,
    "Runs of each name the fleet record keeps, at least.", scope=FILE)
FLEET_KEEP_DAYS = Option(
    "fleet_keep_days", whole(1, defaults.MAX_FLEET_KEEP_DAYS, "days"), defaults.DEFAULT_FLEET_KEEP_DAYS,
    "Days the fleet record keeps a name after its last write.", scope=FILE)

#: Every row, in the order --help, the man page and the reference list them.
OPTIONS: tuple[Option[Any], ...] = (
    NAME, TTL, WAIT, TIMEOUT, KILL_AFTER, ON_LOST, BUSY_EXIT_CODE, ONCE, ONCE_PER, ONCE_EVERY, REMEMBER, SLOTS,
    MIN_HOLD, REPLACE, RETRY, RETRY_DELAY, JITTER, SUCCESS_EXIT, REPLICAS, METRICS_FILE, NOTIFY_URLS, NOTIFY_ON,
    NOTIFY_FORMAT, PING, PING_ON_BUSY, CAPTURE_TAIL, OUTPUT_TAIL, OUTPUT, WARN_AFTER, SYSLOG, KEEP_DETACHED,
    REDACT, RECORD_COMMAND, VERBOSE, QUIET, TIMEZONE, ALLOW_EVICTION, EVERY, SCHEDULE, GRACE,
    CONFIG, REDIS_URL, REDIS_CA, PREFIX, LEDGER,
    STATE_DIR, REDIS_PASSWORD_FILE, LEDGER_KEEP_DAYS, SOCKET_TIMEOUT, CONNECT_TIMEOUT, FLEET_KEEP_RUNS,
    FLEET_KEEP_DAYS,
)
BY_KEY: dict[str, Option[Any]] = {option.key: option for option in OPTIONS}
RUN_OPTIONS = tuple(option for option in OPTIONS if option.scope == RUN)
GLOBAL_OPTIONS = tuple(option for option in OPTIONS if option.scope == GLOBAL)
#: What a config file may set at its top level (``config`` names the file itself), and in ``[job.NAME]``.
FILE_KEYS = frozenset(option.key for option in OPTIONS if option.key not in ("name", "config"))
JOB_KEYS = frozenset(option.key for option in RUN_OPTIONS if option.key != "name")
