"""``lockrun doctor``'s judgement of this host's directories: the state directory (the ledger, and
the local backend's locks) and its lock directory (docs/operating.md "Checking the setup: lockrun
doctor").

What a run refuses (another owner, a mode others may write, an unsafe directory above, a
read-only file system) is FAIL: the run would exit 69 on the local backend, and lose its ledger
with Redis. What a run accepts but should not rely on (others may read it; a network or memory
file system) is WARN.
"""

from __future__ import annotations

from lockrun.system.directory import DirectoryFacts
from lockrun.views.doctor_check import FAIL, OK, WARN, Check, said

#: File systems whose kernel locks do not exclude processes on other hosts (or may not work at all),
#: and on which SQLite's locking is not reliable either.
NETWORK_FILE_SYSTEMS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "fuse.glusterfs",
                                  "fuse.sshfs", "9p", "afs", "lustre", "gpfs", "fuse.s3fs", "davfs", "fuse.davfs2"})
#: File systems that forget everything at reboot.
MEMORY_FILE_SYSTEMS = frozenset({"tmpfs", "ramfs"})


def _name(facts: DirectoryFacts) -> str:
    return "lock_dir" if facts.what == "the local lock directory" else "state_dir"


def directory_check(facts: DirectoryFacts, local: bool) -> Check:
    """One directory, judged; ``local``: it holds the local backend's locks (else only the ledger)."""
    name, path = _name(facts), facts.path
    quoted = path if path and all(c.isalnum() or c in "/._-" for c in path) else repr(path)
    if facts.unreadable:
        return Check(name, FAIL, f"{facts.what} {path}: cannot look at it ({said(facts.unreadable)})",
                     f"make {quoted} a directory lockrun can use, or set LOCKRUN_STATE_DIR")
    if facts.above:
        words = said(facts.above, 400)
        at = words.find("chmod go-w ")
        fix = words[at:] if at >= 0 else "give the directory named to root (or you), or set LOCKRUN_STATE_DIR elsewhere"
        return Check(name, FAIL, words[:at].rstrip(": ") if at >= 0 else words, fix)
    if facts.exists and not facts.is_dir:
        return Check(name, FAIL, f"{facts.what} {path} exists and is not a directory",
                     f"move it away (lockrun creates {quoted} as a directory, mode 0700), or set LOCKRUN_STATE_DIR")
    fs = f"{facts.fs_type} at {facts.mount_point}" if facts.fs_type else "file system unknown"
    if facts.read_only:
        return Check(name, FAIL, f"{facts.what} {path} is on a read-only file system ({fs})",
                     "set LOCKRUN_STATE_DIR (or state_dir in the config file) to a writable directory")
    if facts.exists and facts.uid not in (0, facts.our_uid):
        return Check(name, FAIL, f"{facts.what} {path} is owned by uid {facts.uid}, not by you (uid {facts.our_uid})"
                                 " or root: runs refuse it (its owner could plant links in it)",
                     f"chown {facts.our_uid} {quoted}")
    mode = facts.mode or 0
    if facts.exists and mode & 0o022:
        return Check(name, FAIL, f"{facts.what} {path} is writable by group or others (mode {mode:04o}): runs refuse"
                                 " it (they could plant links in it and make lockrun write through them)",
                     f"chmod 700 {quoted}")
    fs_type = facts.fs_type or ""
    if fs_type in NETWORK_FILE_SYSTEMS:
        what = ("kernel locks there do not exclude runs on other hosts, and may not work at all" if local
                else "SQLite's locking of the ledger is not reliable there")
        return Check(name, FAIL if local else WARN, f"{facts.what} {path} is on a network file system ({fs}): {what}",
                     "set LOCKRUN_STATE_DIR (or state_dir) to a local disk" + ("; for locks across hosts, configure"
                                                                               " a Redis URL" if local else ""))
    if facts.exists and mode & 0o077:
        return Check(name, WARN, f"{facts.what} {path} may be read by group or others (mode {mode:04o}): lock names,"
                                 " commands and the ledger's output tails are private",
                     f"chmod 700 {quoted}")
    owner = f"owned by {'root' if facts.uid == 0 else f'uid {facts.uid}'}, mode {mode:04o}" if facts.exists else (
        "does not exist yet: the first run creates it, mode 0700")
    if fs_type in MEMORY_FILE_SYSTEMS:
        lost = "--once marks, fencing counters and the ledger" if local else "the ledger"
        return Check(name, WARN if local else OK, f"{facts.what} {path}: {owner}, on {fs}: {lost} are forgotten at"
                                                  " reboot", "set LOCKRUN_STATE_DIR (or state_dir) to a directory on"
                                                             " a disk" if local else None)
    return Check(name, OK, f"{facts.what} {path}: {owner}, on {fs}")
