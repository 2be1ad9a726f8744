"""``lockrun completion bash|zsh|fish``: the shell's completion script, on standard output.

The same text the installer places and ``completions/`` holds (click's own script for each shell,
which calls back into ``lockrun`` as you type, so it never goes stale as options change). For
those who install by hand, as gh and kubectl do: ``lockrun completion bash > …``.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from lockrun.cli.group import CONTEXT, cli
from lockrun.cli.params import OneOf

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_LOCKRUN_COMPLETE"  # click's variable for lockrun: _{PROG}_COMPLETE


@cli.command(context_settings=CONTEXT)
@click.argument("shell", metavar="SHELL", type=OneOf(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> NoReturn:
    """Print the completion script for SHELL.

    \b
      lockrun completion bash > /usr/share/bash-completion/completions/lockrun
      lockrun completion zsh > /usr/local/share/zsh/site-functions/_lockrun
      lockrun completion fish > ~/.config/fish/completions/lockrun.fish
      eval "$(lockrun completion bash)"     # this shell only

    scripts/install.sh places all three where each shell looks for them.
    """
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    assert completer is not None  # every name in SHELLS is one of click's
    sys.stdout.write(completer(cli, {}, "lockrun", COMPLETE_VAR).source())
    ctx.exit(0)
