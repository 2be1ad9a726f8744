#!/bin/sh
# Install lockrun and everything that comes with it, from this checkout:
#
#   scripts/install.sh                        # as root: /usr/local, for every user's crontab
#   PREFIX=$HOME/.local scripts/install.sh    # without root: your own crontab
#   DESTDIR=/tmp/stage PREFIX=/usr scripts/install.sh   # packagers: staged, paths as at PREFIX
#
# It places (README "Install"):
#   $PREFIX/lib/lockrun/                 a venv with lockrun and its dependencies
#   $PREFIX/bin/lockrun                  a link to the venv's lockrun (crontabs name it in full)
#   $PREFIX/share/man/man1/lockrun.1     the man page
#   $PREFIX/share/bash-completion/completions/lockrun, $PREFIX/share/zsh/site-functions/_lockrun,
#   $PREFIX/share/fish/vendor_completions.d/lockrun.fish: where each shell looks for them (the
#                                        installed shells are asked; a fish that does not look
#                                        there gets it in its own completions directory, and
#                                        for bash or zsh the one line to add is printed)
#   /etc/lockrun.toml.example            an example config, every key commented out (a personal
#                                        install: ~/.config/lockrun/config.toml.example); copy it
#                                        to the file lockrun reads. Not the file itself: lockrun
#                                        reads the first of /etc/lockrun.toml and
#                                        ~/.config/lockrun/config.toml that exists, and an empty
#                                        /etc/lockrun.toml would hide every user's own file
# PYTHON picks the interpreter (default python3, 3.10 or newer). One that other users cannot
# read (a pyenv under /root, say) is refused when PREFIX is shared: their crontabs could not run it.
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
DESTDIR=${DESTDIR%/}  # DESTDIR=/tmp/stage/ would leave "usr/lib/…" in the scripts, a relative path
PREFIX=${PREFIX%/}
home=${HOME%/}
case $PREFIX in
    "$home"/*) shared=no; config_read=$home/.config/lockrun/config.toml ;;
    *) shared=yes; config_read=/etc/lockrun.toml ;;  # where lockrun looks, whatever the PREFIX
esac

say() { printf 'install: %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

case $PREFIX in /*) ;; *) fail "PREFIX must be an absolute path, not '$PREFIX'" ;; esac
command -v "$PYTHON" >/dev/null 2>&1 || fail "no $PYTHON on PATH (set PYTHON to a Python 3.10 or newer)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || fail "$PYTHON is $("$PYTHON" -c 'import sys; print(sys.version.split()[0])'); lockrun needs 3.10 or newer"

# Every directory from / to the interpreter and its standard library must let others in, or other
# users' cron jobs fail with "Permission denied" before lockrun starts (and cron mails it to them).
if [ "$shared" = yes ]; then
    umask 022  # the venv is read by every user's cron jobs
    "$PYTHON" - <<'PY' || exit 1
import os, stat, sys

def others_may(path, bits):
    return os.stat(path).st_mode & bits == bits

for start, what in ((os.path.realpath(sys.executable), "the interpreter"),
                    (os.path.dirname(os.path.realpath(os.__file__)), "its standard library")):
    path = start
    while True:
        need = stat.S_IXOTH | (stat.S_IROTH if path == start or os.path.isfile(path) else 0)
        if not others_may(path, need):
            where = what if path == start else f"on the way to {what}"
            sys.exit(f"install: {sys.executable} cannot be used by other users: {path} ({where}) is "
                     f"{stat.filemode(os.stat(path).st_mode)}; every user's crontab needs it: use a Python "
                     "others can run (PYTHON=/usr/bin/python3), or install for yourself (PREFIX=$HOME/.local)")
        if path == "/":
            break
        path = os.path.dirname(path)
PY
fi

venv=$PREFIX/lib/lockrun
stage=$DESTDIR$venv
say "venv $stage"
rm -rf "$stage"
mkdir -p "$(dirname "$stage")"
"$PYTHON" -m venv "$stage"
"$stage/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile "$here"
if [ -n "$DESTDIR" ]; then
    # Staged: the venv's scripts name the interpreter where it will be, not where it is built.
    for script in "$stage"/bin/*; do
        [ -f "$script" ] && [ ! -L "$script" ] || continue
        if head -c 2 "$script" | grep -q '^#!'; then
            sed -i "1s|$DESTDIR||" "$script"
        fi
    done
    for file in "$stage"/bin/activate* "$stage/pyvenv.cfg"; do
        [ -f "$file" ] && sed -i "s|$DESTDIR||g" "$file"
    done
fi
# Compiled here once (nobody may write the venv later), naming the sources where they will be.
"$stage/bin/python" -m compileall -q -f -s "$DESTDIR$venv" -p "$venv" "$stage/lib" >/dev/null

mkdir -p "$DESTDIR$PREFIX/bin"
ln -sfn "$venv/bin/lockrun" "$DESTDIR$PREFIX/bin/lockrun"
say "link $DESTDIR$PREFIX/bin/lockrun -> $venv/bin/lockrun"

install -d "$DESTDIR$PREFIX/share/man/man1"
install -m 644 "$here/man/lockrun.1" "$DESTDIR$PREFIX/share/man/man1/lockrun.1"

bash_dir=$DESTDIR$PREFIX/share/bash-completion/completions
zsh_dir=$DESTDIR$PREFIX/share/zsh/site-functions
fish_dir=$DESTDIR$PREFIX/share/fish/vendor_completions.d
install -d "$bash_dir" "$zsh_dir" "$fish_dir"
install -m 644 "$here/completions/lockrun.bash" "$bash_dir/lockrun"
install -m 644 "$here/completions/_lockrun" "$zsh_dir/_lockrun"
install -m 644 "$here/completions/lockrun.fish" "$fish_dir/lockrun.fish"
# Installed for real (not staged): check that each shell looks where its file went, as that shell
# says itself; where it does not, place it where it does or print the one line to add (README "Install").
if [ -z "$DESTDIR" ]; then
    # bash-completion reads the user's ${XDG_DATA_HOME:-~/.local/share}/bash-completion/completions
    # and $XDG_DATA_DIRS' (default /usr/local/share:/usr/share) bash-completion/completions.
    case $bash_dir in
        "${XDG_DATA_HOME:-$HOME/.local/share}/bash-completion/completions" \
            | /usr/local/share/bash-completion/completions | /usr/share/bash-completion/completions) ;;
        *) say "bash: bash-completion does not look in $bash_dir; add this line to ~/.bashrc: . $bash_dir/lockrun" ;;
    esac
    if [ ! -f /usr/share/bash-completion/bash_completion ]; then
        say "note: bash completes lockrun only with the bash-completion package (apt-get install bash-completion),"
        say "      or with this line in ~/.bashrc: . $bash_dir/lockrun"
    fi
    # zsh: its fpath (Debian's and macOS' zsh have /usr/local/share/zsh/site-functions; ~/.local is not).
    if command -v zsh >/dev/null 2>&1 && ! zsh -fc '(( ${fpath[(Ie)$1]} ))' zsh "$zsh_dir"; then
        say "zsh: add this line to ~/.zshrc, before compinit: fpath=($zsh_dir \$fpath)"
    fi
    # fish: $fish_complete_path (Debian's fish does not read /usr/local/share/fish/vendor_completions.d):
    # then the system's completions directory of fish for a shared install, the user's for a personal one.
    if command -v fish >/dev/null 2>&1 && ! fish -c 'contains -- $argv[1] $fish_complete_path' "$fish_dir"; then
        if [ "$shared" = yes ]; then
            where=$(fish --no-config -c 'echo $__fish_sysconf_dir')/completions
        else
            where=$(fish --no-config -c 'echo $__fish_config_dir')/completions
        fi
        install -d "$where"
        install -m 644 "$here/completions/lockrun.fish" "$where/lockrun.fish"
        say "fish: this fish does not look in $fish_dir; placed $where/lockrun.fish"
    fi
fi

example=$DESTDIR$config_read.example
install -d "$(dirname "$example")"
install -m 644 "$here/scripts/lockrun.toml.example" "$example"
if [ -e "$DESTDIR$config_read" ]; then
    say "example config $example (yours, $config_read, is left as it is)"
else
    say "example config $example: copy it to $config_read and uncomment what you need"
fi
if [ -z "$DESTDIR" ]; then
    case ":$PATH:" in
        *":$PREFIX/bin:"*) ;;
        *) say "note: $PREFIX/bin is not on your PATH: name $PREFIX/bin/lockrun in full (crontabs do anyway)" ;;
    esac
fi
say "done: $PREFIX/bin/lockrun --version"
