"""Every default and every limit, written once (docs/reference.md "Ranges"; rq's ``defaults.py`` is the model).

Parsers (``config/values``), the config file's schema, ``--help`` and docs/reference.md's tables quote
these; a default restated elsewhere is a bug waiting to happen.
"""

from __future__ import annotations

from lockrun.core.errors import ExitCode

# --- defaults -------------------------------------------------------------------------------

DEFAULT_TTL = 60.0  # seconds of lease, renewed every TTL/3
DEFAULT_PREFIX = "lockrun:"  # of every Redis key
DEFAULT_KILL_AFTER = 10.0  # seconds between SIGTERM and SIGKILL when lockrun stops the command
DEFAULT_BUSY_EXIT = ExitCode.BUSY.value  # 75, EX_TEMPFAIL: what a busy lock exits with (-E changes it)
DEFAULT_REMEMBER_S = 30 * 86400.0  # how long a --once key stays done
DEFAULT_TIMELINE_WIDTH = 100  # `timeline` without a terminal or $COLUMNS
# The fleet record's retention (docs/fleet.md "One fleet, one memory", "What the fleet record costs"):
# per name, the newest runs kept in its stream, and the age past which runs are dropped (and a
# name's record expires after its last write). Chosen for a Redis shared with other work: at
# about 132 bytes a run, a name stays under 64 KiB (10,000 names under 640 MB; bench/fleet_memory.py).
DEFAULT_FLEET_KEEP_RUNS = 300
DEFAULT_FLEET_KEEP_DAYS = 30

# --- ranges: every number lockrun accepts has one, checked when it is parsed (exit 2, or 78 in a
# config file). docs/reference.md's "Ranges" table and --help quote these constants. ------------------

#: The longest lease, --wait, --timeout, --kill-after and --min-hold: 365 days. A lease
#: travels as milliseconds to Redis (PX), as a time_t to the backstop timer and as a
#: timeout to thread and select waits; the last overflow at about 292 years on 64-bit
#: Linux, so a year leaves room for every sum lockrun makes of them.
MAX_SECONDS = 365 * 86400
#: The longest --remember, history --since and prune --older-than: 100 years (36500d),
#: well inside what ISO timestamps (year 9999) and Redis expiries can hold.
MAX_DURATION_S = 36500 * 86400
#: A --wait waiter sleeps (BLPOP) until a wake-up, or the holder's remaining lease and this margin
#: (its expiry on the server's clock: PTTL is rounded down to a millisecond), and at most
#: MAX_BLOCK_S at a time: an idle connection longer than that may be cut by a load balancer or a
#: proxy (Azure's drops them after 4 minutes) without a word, and then waiting on it gets nothing.
WAKE_MARGIN_S = 0.005
MAX_BLOCK_S = 120.0

#: ledger_keep_days: 1 to 36500 (100 years).
MAX_KEEP_DAYS = 36500
#: socket_timeout / connect_timeout in the config: more than 0, at most 300 s (and a run
#: caps them at TTL/3 anyway).
MAX_CALL_TIMEOUT_S = 300
#: history --limit: 1 to 1,000,000,000 rows.
MAX_HISTORY_LIMIT = 1_000_000_000
#: --slots: 1 to 10,000 holders.
MAX_SLOTS = 10_000
#: --capture-tail: at most 16 MiB of output kept.
MAX_TAIL = 16 * 1024 * 1024
#: The tail of a failed run's output kept in this host's ledger by default, when lockrun's output is
#: not a terminal (docs/operating.md "Output"): the last 4 KiB, as much as the fleet record keeps.
DEFAULT_FAILURE_TAIL = 4096
DEFAULT_FAILURE_TAIL_TEXT = "4 KiB"
#: --warn-after: from 1 second (the main loop's deadlines are that coarse at best for a person) to
#: 30 days (a job slower than that is not a cron job).
MIN_WARN_AFTER_S = 1.0
MAX_WARN_AFTER_S = 30 * 86400.0
#: --replicas: 0 to 100 (or all).
MAX_REPLICAS = 100
#: fleet_keep_runs and fleet_keep_days in the config file.
MAX_FLEET_KEEP_RUNS = 1_000_000
MAX_FLEET_KEEP_DAYS = 3650
#: `timeline --width`: the narrowest that leaves ten columns of time, and the widest.
TIMELINE_WIDTHS = (70, 1000)


def days_text(seconds: float) -> str:
    """A limit in days, as --help says it: ``365d``."""
    return f"{seconds / 86400:g}d"


MAX_DURATION_TEXT = days_text(MAX_DURATION_S)  # "36500d"
MAX_MIN_HOLD_TEXT = days_text(MAX_SECONDS)  # "365d"

#: `lockrun pause --for/--until`: at most 30 days ahead (docs/operating.md "Pausing a job"). A pause
#: always ends by itself: one forgotten would silence a job for good.
MAX_PAUSE_S = 30 * 86400
MAX_PAUSE_TEXT = days_text(MAX_PAUSE_S)  # "30d"
#: `lockrun pause --reason`: at most this many characters (one line in status).
MAX_PAUSE_REASON = 200

#: `--grace`: how late a start declared by --every/--schedule may be before it is overdue.
DEFAULT_GRACE_S = 300.0
DEFAULT_GRACE_TEXT = "5m"

# --- --retry, --retry-delay, --jitter, --success-exit (docs/operating.md "Retries and jitter") ---

DEFAULT_RETRY_DELAY_S = 10.0  # the pause before the first retry; each further one doubles
#: A further pause doubles up to this (10 minutes), or up to --retry-delay when that is longer.
RETRY_DELAY_CAP_S = 600.0
#: --retry: 0 to 100 more attempts.
MAX_RETRIES = 100
#: --retry-delay and --jitter: 0 to 24 hours.
MAX_RETRY_DELAY_S = 86400.0
MAX_JITTER_S = 86400.0
#: --success-exit: codes 1 to 255, at most 32 of them.
MAX_SUCCESS_EXITS = 32

#: ``--replicas all``: every replica in sync with the master (backends/redis/replicas.py).
ALL_REPLICAS = "all"
