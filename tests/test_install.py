"""scripts/install.sh (README "Install"): one command places the venv, the link, the man page,
the three shells' completions and an example config that it never overwrites; it refuses an
interpreter other users cannot run when it installs for every user."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSTALL = ROOT / "scripts" / "install.sh"


def usable_by_others(python: str) -> bool:
    """Whether every directory up to the interpreter lets other users in (what install.sh checks)."""
    path = os.path.realpath(python)
    while True:
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        if path == "/":
            return True
        path = os.path.dirname(path)


def shared_python() -> str | None:
    for candidate in ("/usr/bin/python3", sys.executable):
        if os.path.exists(candidate) and usable_by_others(candidate):
            return candidate
    return None


def install(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(INSTALL)], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=600)


def test_one_install_places_everything_and_never_a_config_lockrun_would_read(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    python = shared_python()
    if python is not None:  # a system-wide install, staged as a packager would
        env = {"DESTDIR": str(stage), "PREFIX": "/usr/local", "PYTHON": python}
        prefix, config_read = "/usr/local", "/etc/lockrun.toml"
    else:  # this machine's Python is private to its owner: an install for oneself, under a home
        home = tmp_path / "home"
        env = {"DESTDIR": str(stage), "HOME": str(home), "PREFIX": f"{home}/.local", "PYTHON": sys.executable}
        prefix, config_read = f"{home}/.local", f"{home}/.config/lockrun/config.toml"
    done = install(env)
    assert done.returncode == 0, done.stderr
    placed = stage / prefix.lstrip("/")
    link = placed / "bin" / "lockrun"
    assert os.readlink(link) == f"{prefix}/lib/lockrun/bin/lockrun"  # the final path, not the stage
    venv_lockrun = placed / "lib" / "lockrun" / "bin" / "lockrun"
    assert venv_lockrun.read_text().splitlines()[0] == f"#!{prefix}/lib/lockrun/bin/python"
    version = subprocess.run([str(placed / "lib" / "lockrun" / "bin" / "python"), "-m", "lockrun", "--version"],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("lockrun "), version
    # The wheel (hatchling) ships the Python API's types: py.typed and the stub of the lazy exports.
    (package,) = (placed / "lib" / "lockrun" / "lib").glob("python3*/site-packages/lockrun")
    assert (package / "py.typed").is_file() and (package / "__init__.pyi").is_file()
    man_page = placed / "share" / "man" / "man1" / "lockrun.1"
    assert man_page.read_bytes() == (ROOT / "man" / "lockrun.1").read_bytes()
    rendered = subprocess.run(["man", "-l", str(man_page)], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "80"})
    assert rendered.returncode == 0 and "lockrun" in rendered.stdout and "EXIT STATUS" in rendered.stdout, rendered
    for where, source in (("share/bash-completion/completions/lockrun", "lockrun.bash"),
                          ("share/zsh/site-functions/_lockrun", "_lockrun"),
                          ("share/fish/vendor_completions.d/lockrun.fish", "lockrun.fish")):
        assert (placed / where).read_text() == (ROOT / "completions" / source).read_text(), where
    # The example beside the file lockrun reads, never that file: an empty /etc/lockrun.toml would
    # hide every user's own ~/.config/lockrun/config.toml (the first file found is the one read).
    example = stage / (config_read + ".example").lstrip("/")
    assert example.read_text() == (ROOT / "scripts" / "lockrun.toml.example").read_text()
    assert stat.S_IMODE(example.stat().st_mode) == 0o644
    assert not (stage / config_read.lstrip("/")).exists()
    assert f"copy it to {config_read}" in done.stderr
    # The example parses as a config file: every key commented out, so lockrun reads nothing.
    status = subprocess.run([sys.executable, "-m", "lockrun", "--config", str(example), "history"],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "LOCKRUN_STATE_DIR": str(tmp_path / "state"),
                                 "LOCKRUN_LEDGER": str(tmp_path / "ledger.db")})
    assert status.returncode == 0, status.stderr
    # Staged: no file of the venv names the stage (scripts, activate*, compiled sources).
    venv = placed / "lib" / "lockrun"
    for path in venv.rglob("*"):
        if path.is_file() and not path.is_symlink() and (path.suffix in (".pyc", ".cfg", "") or
                                                         path.name.startswith("activate")):
            assert str(stage).encode() not in path.read_bytes(), path


def test_an_interpreter_other_users_cannot_run_is_refused_for_a_shared_install(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    os.chmod(private, 0o700)
    # A copy of the interpreter in a directory only its owner may enter (as a pyenv under /root).
    subprocess.run([sys.executable, "-m", "venv", "--copies", "--without-pip", str(private / "venv")], check=True,
                   timeout=120)
    stage = tmp_path / "stage"
    python = private / "venv" / "bin" / "python3"
    refused = install({"DESTDIR": str(stage), "PREFIX": "/usr/local", "PYTHON": str(python)})
    assert refused.returncode == 1
    lines = refused.stderr.splitlines()
    assert len(lines) == 1 and "cannot be used by other users" in lines[0] and str(private) in lines[0], lines
    assert "PREFIX=$HOME/.local" in lines[0]
    assert not stage.exists()


def test_the_completion_command_prints_what_completions_holds() -> None:
    for shell, source in (("bash", "lockrun.bash"), ("zsh", "_lockrun"), ("fish", "lockrun.fish")):
        printed = subprocess.run([sys.executable, "-m", "lockrun", "completion", shell], capture_output=True,
                                 text=True, timeout=60, cwd=ROOT)
        assert printed.returncode == 0 and printed.stdout == (ROOT / "completions" / source).read_text(), shell
    wrong = subprocess.run([sys.executable, "-m", "lockrun", "completion", "tcsh"], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "'tcsh' is not one of" in wrong.stderr
