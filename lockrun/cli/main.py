"""The entry point: parse, let the command make its one call, and turn what went wrong into one
line on stderr and an exit code (README "Exit codes"). Only ``cli/`` imports click.
"""

from __future__ import annotations

import os
import sys

import click

# The commands are imported as they are asked for (group.COMMAND_MODULES).
from lockrun.cli.group import cli
from lockrun.cli.output import say
from lockrun.core.errors import ExitCode, LockrunError


def _one_line(exc: click.ClickException) -> str:
    import re

    from lockrun.core.printable import QUOTED_CHARS, clipped, quoted

    message = exc.format_message()
    if isinstance(exc, click.NoSuchOption):  # click quotes it with repr: '\udcff' for a byte
        message = message.replace(repr(exc.option_name), quoted(exc.option_name), 1)
    # What else click echoes of the user's (an extra argument) is cut as every quoted value is.
    message = re.sub(rf"\S{{{2 * QUOTED_CHARS},}}", lambda long: clipped(long.group(0)), " ".join(message.split()))
    command = None
    if isinstance(exc, click.UsageError) and exc.ctx is not None and exc.ctx.command is not cli:
        command = exc.ctx.command.name
    hint = f"lockrun {command} --help" if command else "lockrun --help"
    return f"{message.rstrip('.')} (see '{hint}')"  # "Missing argument 'X'. (see" read badly


def _no_command() -> int:
    """Plain ``lockrun``: the help, on stderr and on several lines as ``lockrun --help`` prints it,
    and exit 2 (README "Exit codes"): no command is a usage error, whatever click's version does."""
    ctx = click.Context(cli, info_name="lockrun", **cli.context_settings)
    click.echo(cli.get_help(ctx), err=True)
    return ExitCode.USAGE


def main(argv: list[str] | None = None) -> None:
    from lockrun.system import own_output

    closed = own_output.reserve_standard_streams()
    own_output.guard(closed_at_start=1 in closed)  # lockrun's own output failing: one line, exit 1
    args = sys.argv[1:] if argv is None else list(argv)
    if not args and "_LOCKRUN_COMPLETE" not in os.environ:  # shell completion also comes without arguments
        sys.exit(own_output.finish(_no_command(), say))
    if "_LOCKRUN_COMPLETE" in os.environ:  # the shell asks what to complete (completion.COMPLETE_VAR)
        from lockrun.cli import completion

        completion.use_whole_fish_descriptions()
    sys.exit(own_output.finish(_run(args), say))


def _run(args: list[str]) -> int:
    """The command's exit code; what went wrong as one line on stderr, never a traceback."""
    from lockrun.system import own_output

    try:
        code = cli.main(args=args, prog_name="lockrun", standalone_mode=False)
    except own_output.OutputFailed as exc:
        code = own_output.failed(exc, 0, say)
    except click.UsageError as exc:
        say(_one_line(exc))
        code = ExitCode.USAGE
    except click.ClickException as exc:
        say(_one_line(exc))
        code = exc.exit_code
    except click.Abort:
        code = ExitCode.SIGNAL_BASE + 2
    except LockrunError as exc:  # every error lockrun names: one line and its exit code
        say(str(exc))
        code = exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the user gets one line, never a traceback
        say(f"internal error: {exc!r}")
        code = ExitCode.INTERNAL
    return int(code or 0)
