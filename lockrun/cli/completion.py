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


def use_whole_fish_descriptions() -> None:
    """Make fish's script click's, but splitting each answer ``type,value<TAB>description`` at its
    first comma only (``string split -m 1``): click's splits at every comma, which cut an option's
    description at its first one. Called before any completion work (cli/main, when
    COMPLETE_VAR is set, and ``completion``): a run never imports click's completion module."""
    from click.shell_completion import FishComplete, add_completion_class

    class WholeFishComplete(FishComplete):
        source_template = FishComplete.source_template.replace('(string split "," $completion)',
                                                               '(string split -m 1 "," $completion)')

    if WholeFishComplete.source_template == FishComplete.source_template:
        raise RuntimeError("click's fish completion script changed: see lockrun/cli/completion.py")
    add_completion_class(WholeFishComplete, "fish")


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

    use_whole_fish_descriptions()
    completer = get_completion_class(shell)
    assert completer is not None  # every name in SHELLS is one of click's
    sys.stdout.write(completer(cli, {}, "lockrun", COMPLETE_VAR).source())
    ctx.exit(0)
