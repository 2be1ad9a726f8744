"""Completion in the real shells after the README's install (contract §16; README "Install"):
`PREFIX=$HOME/.local scripts/install.sh`, then bash (with Debian's bash-completion), zsh (with
the one line the installer prints) and fish each complete the bare form `lockrun --tt<Tab>` to
`--ttl`, from where the installer put the file; fish shows an option's description whole."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import read_until
from tests.real_clients import data_file, program

ROOT = Path(__file__).resolve().parent.parent
README_INSTALL = "PREFIX=$HOME/.local scripts/install.sh"


@pytest.fixture(scope="module")
def installed():
    """One install for the module: the README's line for a personal install, in a home of its own."""
    readme = (ROOT / "README.md").read_text()
    assert f"`{README_INSTALL}`" in readme  # the install the README gives, run below as written
    home = Path(tempfile.mkdtemp(prefix="lr-home-"))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LOCKRUN_", "XDG_"))},
           "HOME": str(home), "PYTHON": sys.executable, "LOCKRUN_STATE_DIR": str(home / "state"),
           "LOCKRUN_CONFIG": os.devnull}
    done = subprocess.run(["sh", "-c", README_INSTALL], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    env["PATH"] = f"{home}/.local/bin:/usr/bin:/bin"  # the shells find the installed lockrun, and only it
    yield home, env, done.stderr


def test_bash_completes_the_bare_form_from_the_installed_file(installed):
    bash_completion = data_file("/usr/share/bash-completion/bash_completion", "bash-completion")
    home, env, _ = installed
    script = (f"source {bash_completion}\n"
              "__load_completion lockrun || exit 9\n"  # bash-completion's own lookup, as on <Tab>
              "COMP_WORDS=(lockrun --tt); COMP_CWORD=1; COMP_LINE='lockrun --tt'; COMP_POINT=${#COMP_LINE}\n"
              "$(complete -p lockrun | sed 's/.* -F \\([^ ]*\\) .*/\\1/') lockrun --tt lockrun\n"
              "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    result = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.split() == ["--ttl"], result
    assert (home / ".local/share/bash-completion/completions/lockrun").exists()


def test_fish_completes_the_bare_form_with_whole_descriptions(installed):
    fish = program("fish", "fish")
    home, env, stderr = installed
    assert "fish:" not in stderr  # ~/.local/share/fish/vendor_completions.d is one fish reads
    result = subprocess.run([fish, "-c", "complete -C 'lockrun --tt'; complete -C 'lockrun -n job --wa'"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result
    found = dict(line.split("\t", 1) for line in result.stdout.splitlines())
    assert set(found) == {"--ttl", "--wait", "--warn-after"}, found
    # Whole: click's own script cut these at their first comma.
    assert found["--ttl"].startswith("Lease length (at least 1s and at most 365d): seconds (90) or with a unit")
    assert "(90s, 2m, 1.5h, 7d)" in found["--ttl"] and re.search(r"\[default: 0 \(give up at once\); with --replace",
                                                                  found["--wait"])


def test_zsh_completes_the_bare_form_after_the_line_the_installer_prints(installed):
    zsh = program("zsh", "zsh")
    home, env, stderr = installed
    printed = re.search(r"zsh: add this line to ~/\.zshrc, before compinit: (.+)", stderr)
    assert printed, stderr  # ~/.local/share/zsh/site-functions is on no zsh's fpath by default
    zdotdir = home / "zdot"
    zdotdir.mkdir(exist_ok=True)
    shown = home / "buffer"
    (zdotdir / ".zshrc").write_text(
        f"{printed[1]}\nautoload -Uz compinit && compinit -u\n"
        f"show-buffer() {{ print -r -- \"[$BUFFER]\" > {shown} }}\nzle -N show-buffer\nbindkey '^X^B' show-buffer\n"
        "PS1='zsh-ready> '\n")
    master, slave = os.openpty()
    proc = subprocess.Popen([zsh, "-i"], env={**env, "ZDOTDIR": str(zdotdir), "TERM": "xterm"}, stdin=slave,
                            stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    try:
        read_until(master, b"zsh-ready> ", timeout=30)  # zle reads keys from here on, in order
        os.write(master, b"lockrun --tt\t\x18\x02")
        deadline = time.monotonic() + 30
        while not (shown.exists() and shown.read_text().strip()):
            assert time.monotonic() < deadline and proc.poll() is None, "zsh did not show its buffer"
            if select.select([master], [], [], 0.1)[0]:
                os.read(master, 65536)  # keep the terminal drained
        assert shown.read_text().strip() == "[lockrun --ttl ]"
    finally:
        proc.kill()
        proc.wait(10)
        os.close(master)
