"""Generate man/lockrun.1 (roff) from the click app, so the man page can never drift from --help.

    python scripts/gen_manpage.py           # write man/lockrun.1
    python scripts/gen_manpage.py --check   # exit 1 if it is stale

A small generator rather than a library: the page needs sections that no
click-to-man tool derives from the app (ENVIRONMENT, FILES, the exit-status
table from lockrun.core.errors, crontab EXAMPLES), and the output must be
byte-for-byte reproducible for the staleness test: its .TH date is the version's
(lockrun.__date__), never the build's, and it passes ``mandoc -Tlint`` (tests/test_client_man.py).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import click

from lockrun import __date__, __version__
from lockrun.cli.group import every_command
from lockrun.core.errors import EXIT_CODE_DOCS

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "man" / "lockrun.1"

DESCRIPTION = [
    "lockrun wraps a command, usually a crontab entry, so that it never runs twice at once. "
    "It takes a named lock (in Redis when a URL is configured, else in the local state directory), "
    "runs the command in its own process group with stdin, stdout and stderr untouched, renews the "
    "lease every TTL/3 from a background thread, releases the lock with compare-and-delete, and "
    "records every run in a SQLite ledger.",
    "If the lease cannot be kept (Redis down, paused or restarted, the lock cleared), the command's "
    "process group is sent SIGTERM and then SIGKILL so that it is dead before the lease it last "
    "renewed can expire, and lockrun exits 76. If lockrun itself dies, even by SIGKILL, the command's "
    "whole process group is killed at once. Processes that leave the group (setsid, double forks, "
    "daemons) are stopped and reaped before the lock is released as well, unless --keep-detached; "
    "if lockrun is SIGKILLed, they are killed only where it could give the command a cgroup of its "
    "own (docs/guarantees.md, \"What the command starts\").",
    "The command sees LOCKRUN_NAME, LOCKRUN_RUN_ID and LOCKRUN_FENCING_TOKEN; the fencing token is an "
    "integer that strictly increases with every acquisition of the name, for systems that can reject a "
    "stale writer. With Redis it is max(the previous token + 1, the server's clock in microseconds), so it "
    "does not go back after a restart without persistence, a failover or a FLUSHALL either (as long as the "
    "server clocks do not); the local backend counts 1, 2, 3... in a durable file.",
    "With --replicas N (or all), each acquire and each renewal is followed, in the same round trip, by a "
    "WAIT for that many replicas of the Redis master: a lock that too few replicas acknowledged is given "
    "back and lockrun exits 69 without running the command, and a renewal too few acknowledged does not "
    "count, so the deadline lockrun enforces is one that a replica promoted by a failover knows too.",
    "lockrun is silent on success and on a busy skip, and prints one line on stderr on real trouble.",
    "With Redis, every host also writes a fleet record of its runs into the same scripts that take and "
    "release the lock (no extra round trip): status shows each lock's last run on any host, and "
    "history, show and metrics read every host's runs with --fleet.",
    "The bare form lockrun [OPTIONS] -- COMMAND is the same as lockrun run; it applies when the first "
    "argument is an option or --.",
]

ENVIRONMENT = [
    ("LOCKRUN_REDIS_URL", "Redis URL (redis://, rediss://, unix://, redis+cluster://h1:7000,h2:7001/, "
                          "redis+sentinel://h1:26379,h2:26379/mymaster/0); without one the local backend is used."),
    ("LOCKRUN_REDIS_CA", "CA certificates that verify a rediss:// server (default: the system's)."),
    ("LOCKRUN_REDIS_PASSWORD_FILE", "File whose first line is the Redis password (config: redis_password_file), "
                                    "so that it is in neither argv nor the environment. Owned by root or you, "
                                    "writable by nobody else, not readable by others."),
    ("LOCKRUN_PREFIX", "Namespace of every Redis key (default lockrun:)."),
    ("LOCKRUN_LEDGER", "Path of the SQLite run ledger (default $LOCKRUN_STATE_DIR/ledger.db)."),
    ("LOCKRUN_STATE_DIR", "Where the ledger and local locks live (default /var/lib/lockrun for root, "
                          "else $XDG_STATE_HOME/lockrun, i.e. ~/.local/state/lockrun)."),
    ("LOCKRUN_CONFIG", "TOML config file to use instead of the default locations."),
    ("LOCKRUN_TTL", "Default lease length in seconds."),
    ("LOCKRUN_TZ", "The IANA time zone of --once-per periods and --once % keys (as --tz; config: timezone); "
                   "default the host's local zone, named from TZ or /etc/localtime. One zone per lock name."),
    ("LOCKRUN_SYSLOG_SOCKET", "The syslog socket --syslog writes to (default /dev/log): a container's mounted "
                              "socket, or a test's."),
    ("LOCKRUN_SYSLOG_FORMAT", "The form of --syslog's lines, as logger(1) writes them: local (the default: what "
                              "syslog(3) sends to the local socket, a timestamp and the tag lockrun[PID]), rfc5424 "
                              "or rfc3164 (with this host's name, for a socket that relays to another host)."),
    ("TMPDIR", "Where --output on-failure keeps the command's output, in a file without a name (default /tmp)."),
    ("TZ", "Names the host's local zone when LOCKRUN_TZ, --tz and timezone are not given."),
    ("NO_COLOR", "Disables colour in the status and history tables and the timeline (which then draws letters)."),
    ("FORCE_COLOR", "Colour even when standard output is not a terminal."),
    ("COLUMNS", "Width of the timeline when standard output is not a terminal (default 100)."),
    ("LOCKRUN_NAME, LOCKRUN_RUN_ID, LOCKRUN_FENCING_TOKEN", "Set by lockrun for the command it runs. The "
     "command's LOCKRUN_REDIS_URL, if lockrun had one, has no password."),
]

FILES = [
    ("/etc/lockrun.toml", "System-wide config file: redis_url, redis_ca, redis_password_file, socket_timeout, "
                          "connect_timeout, prefix, ledger, state_dir, ttl, min_hold, replicas, notify_urls, "
                          "ledger_keep_days, metrics_file, fleet_keep_runs, fleet_keep_days, allow_eviction, "
                          "timezone. Must be owned by root or "
                          "you and writable by nobody else. Used if it exists."),
    ("~/.config/lockrun/config.toml", "Per-user config file, used when /etc/lockrun.toml does not exist."),
    ("$LOCKRUN_STATE_DIR/", "Must be owned by you or root and writable by nobody else; created 0700. lockrun "
                            "follows no link in it."),
    ("$LOCKRUN_STATE_DIR/ledger.db", "The SQLite run ledger (WAL mode), created 0600."),
    ("$LOCKRUN_STATE_DIR/locks/", "Local-backend lock files (POSIX record locks) and holder descriptions."),
    ("$LOCKRUN_STATE_DIR/once/", "Local-backend --once keys that succeeded, and each name's --once time zone "
                                 "(once/NAME/~zone)."),
]

# Crontab lines are the README's, verbatim (tests/test_docs.py checks it), so the real-cron test
# that runs the README's lines covers these too.
EXAMPLES = [
    ("Every 5 minutes on every host, one at a time; a busy run exits 75 quietly. cron's PATH is "
     "/usr/bin:/bin, so the line names lockrun in full (or the crontab sets PATH= at its top):",
     "*/5 * * * * /usr/local/bin/lockrun -n sync-invoices --ttl 120 -- /opt/app/bin/sync-invoices"),
    ("Treat a busy lock as success for cron:",
     "* * * * * /usr/local/bin/lockrun -n poll-queue -E 0 -- /opt/app/bin/poll-queue"),
    ("Wait up to 10 minutes for the previous run; never run longer than an hour:",
     "0 * * * * /usr/local/bin/lockrun -n hourly-report --wait 600 --timeout 3600 -- /opt/app/bin/report"),
    ("Run a day's payroll at most once, however often it is started:",
     "0 6 * * * /usr/local/bin/lockrun -n payroll --once-per day -- /opt/app/bin/payroll"),
    ("A key of your own: cron turns % into a newline, so a crontab writes it as \\% (cron removes the "
     "backslash):",
     "0 3 * * * /usr/local/bin/lockrun -n nightly-billing --once 'billing-\\%Y-\\%m-\\%d' -- /opt/app/bin/bill"),
    ("Ping healthchecks.io around each run and post failures to Slack with the output's last 10 KiB:",
     "*/10 * * * * /usr/local/bin/lockrun -n sync-invoices --capture-tail 10k "
     "--ping https://hc-ping.com/your-check-uuid --notify https://hooks.slack.com/services/T000/B000/XXXX "
     "--notify-format slack -- /opt/app/bin/sync-invoices"),
    ("A shell pipeline (lockrun runs argv directly; pipefail: a failing pg_dump fails the run):",
     "30 2 * * * /usr/local/bin/lockrun -n nightly-dump -- "
     "bash -o pipefail -c 'pg_dump app | gzip > /backup/app.sql.gz'"),
    ("See who holds what, what ran, and clear a crashed holder:",
     "lockrun status\nlockrun history sync-invoices --since 7d\nlockrun unlock sync-invoices"),
    ("Every host's runs of a job, from the fleet record in Redis, and one scrape for the fleet:",
     "lockrun history --fleet sync-invoices --since 7d\nlockrun metrics --fleet"),
    ("The last day of runs at a glance, and a week of two jobs as an image for a ticket:",
     "lockrun timeline\nlockrun timeline nightly-dump sync-invoices --since 7d --svg week.svg"),
]


def esc(text: str) -> str:
    """Escape text for roff: backslashes, hyphens in words, and control characters at line starts."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    lines = []
    for line in text.split("\n"):
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def paragraphs(help_text: str) -> list[tuple[str, str]]:
    """Split click help into ("text"|"verbatim", block) pairs; a \\b paragraph is verbatim."""
    blocks = []
    for block in help_text.strip().split("\n\n"):
        block = "\n".join(line.strip() if not block.startswith("\b") else line for line in block.split("\n"))
        if block.startswith("\b"):
            lines = [line.strip() for line in block.split("\n")[1:]]
            blocks.append(("verbatim", "\n".join(lines)))
        else:
            blocks.append(("text", " ".join(block.split())))
    return blocks


def option_entry(param: click.Parameter, ctx: click.Context) -> list[str]:
    record = param.get_help_record(ctx)
    if record is None:
        return []
    names, help_text = record
    out = [".TP", "\\fB" + esc(names).replace(", ", "\\fR, \\fB").replace(" ", "\\fR \\fI", 1) + "\\fR"]
    if help_text:
        out.append(esc(" ".join(help_text.split())))
    return out


def _context(name: str, command: click.Command) -> click.Context:
    return click.Context(command, info_name=f"lockrun {name}", **command.context_settings)


def command_section(name: str, command: click.Command) -> list[str]:
    ctx = _context(name, command)
    usage = " ".join(command.collect_usage_pieces(ctx))
    out = [f'.SS "lockrun {name} {esc(usage)}"']
    for kind, block in paragraphs(command.help or ""):
        if kind == "verbatim":
            out += [".PP", ".nf", ".RS 4", esc(block), ".RE", ".fi"]
        else:
            out += [".PP", esc(block)]
    for param in command.get_params(ctx):
        if isinstance(param, click.Option):
            out += option_entry(param, ctx)
    return out


def render() -> str:
    out = [
        f'.TH LOCKRUN 1 "{__date__}" "lockrun {__version__}" "User Commands"',
        ".\\\" Generated by scripts/gen_manpage.py from the click app; do not edit by hand.",
        ".SH NAME",
        "lockrun \\- run a cron command under a named lease so it never runs twice at once",
        ".SH SYNOPSIS",
        ".nf",
        "\\fBlockrun\\fR [\\fIOPTIONS\\fR] \\fB\\-\\-\\fR \\fICOMMAND\\fR [\\fIARG\\fR...]",
    ]
    for name, command in every_command().items():
        ctx = _context(name, command)
        out.append(f"\\fBlockrun {name}\\fR " + esc(" ".join(command.collect_usage_pieces(ctx))))
    out += ["\\fBlockrun \\-\\-version\\fR | \\fB\\-\\-help\\fR", ".fi", ".SH DESCRIPTION"]
    for text in DESCRIPTION:
        out += [".PP", esc(text)]
    out.append(".SH COMMANDS")
    for name, command in every_command().items():
        out += command_section(name, command)
    out.append(".SH ENVIRONMENT")
    for name, text in ENVIRONMENT:
        out += [".TP", f"\\fB{esc(name)}\\fR", esc(text)]
    out.append(".SH FILES")
    for name, text in FILES:
        out += [".TP", f"\\fI{esc(name)}\\fR", esc(text)]
    out += [".SH EXIT STATUS", ".TS", "tab(|);", "l lx l.", "\\fBcode\\fR|\\fBmeaning\\fR|\\fBran?\\fR"]
    for code, meaning, ran in EXIT_CODE_DOCS:
        out.append(f"{esc(code)}|T{{\n{esc(meaning)}\nT}}|{esc(ran)}")
    out += [
        ".TE",
        ".PP",
        esc("A shell also reports 137 when lockrun itself died of SIGKILL: kill -9, the OOM killer, or its own "
            "backstop timer after it was stopped or starved past its lease. The command died with it; its ledger "
            "row reads abandoned."),
        ".PP",
        esc("unlock exits 0 when the lock is gone afterwards (or was not held), 1 when it refused. "
            "status exits 0, or 69 when the backend is unreachable (after printing what the ledger knows). "
            "history, show and metrics exit 0, or 1 when the ledger exists but cannot be read (show also when no "
            "run has that id); prune exits 0, or 1 when the ledger cannot be written; timeline exits 0, or 1 "
            "when the ledger exists but cannot be read or the SVG cannot be written."),
        ".SH EXAMPLES",
    ]
    for text, example in EXAMPLES:
        out += [".PP", esc(text), ".PP", ".nf", ".RS 4", esc(example), ".RE", ".fi"]
    out += [".SH SEE ALSO", "\\fBcrontab\\fR(5), \\fBflock\\fR(1), \\fBredis\\-server\\fR(1)"]
    return "\n".join(linted(out)) + "\n"


def linted(lines: list[str]) -> list[str]:
    """What ``mandoc -Tlint`` asks of a page: no paragraph macro right after a heading (.SH and
    .SS start one), and text lines of at most 80 bytes where the text is filled (roff joins them
    again); lines of a no-fill block (.nf: the examples) are kept as written."""
    out: list[str] = []
    filled = True
    for line in "\n".join(lines).split("\n"):
        if line == ".PP" and out and out[-1].startswith((".SH", ".SS")):
            continue
        if line in (".nf", ".fi"):
            filled = line == ".fi"
        tag = bool(out) and out[-1] == ".TP"  # a .TP's tag is one input line: never wrapped
        if filled and not tag and not line.startswith((".", "'", "T}")) and len(line.encode()) > 80 \
                and "T{" not in line:
            # a wrapped line that starts with . or ' would be read as a request: \& keeps it text
            out += ["\\&" + part if part.startswith((".", "'")) else part
                    for part in textwrap.wrap(line, 80, break_long_words=False, break_on_hyphens=False)]
            continue
        out.append(line)
    return out


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE} is stale: run python scripts/gen_manpage.py")
            return 1
        return 0
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
