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


def directory_check(facts: DirectoryFacts, local: bool) -> Check:
    """One directory, judged; ``local``: it holds the local backend's locks (else only the ledger).
    The first rule that finds something wrong gives the check, in the order of ``RULES``."""
    for rule in RULES:
        found = rule(facts, local)
        if found is not None:
            return found
    return _usable(facts, local)


def _name(facts: DirectoryFacts) -> str:
    return "lock_dir" if facts.what == "the local lock directory" else "state_dir"


def _quoted(facts: DirectoryFacts) -> str:
    """The path as a fix's shell command can take it."""
    path = facts.path
    return path if path and all(c.isalnum() or c in "/._-" for c in path) else repr(path)


def _fs(facts: DirectoryFacts) -> str:
    return f"{facts.fs_type} at {facts.mount_point}" if facts.fs_type else "file system unknown"


def _unreadable(facts: DirectoryFacts, local: bool) -> Check | None:
    if not facts.unreadable:
        return None
    return Check(_name(facts), FAIL, f"{facts.what} {facts.path}: cannot look at it ({said(facts.unreadable)})",
                 f"make {_quoted(facts)} a directory lockrun can use, or set LOCKRUN_STATE_DIR")


def _unsafe_above(facts: DirectoryFacts, local: bool) -> Check | None:
    if not facts.above:
        return None
    words = said(facts.above, 400)
    at = words.find("chmod go-w ")
    fix = words[at:] if at >= 0 else "give the directory named to root (or you), or set LOCKRUN_STATE_DIR elsewhere"
    return Check(_name(facts), FAIL, words[:at].rstrip(": ") if at >= 0 else words, fix)


def _not_a_directory(facts: DirectoryFacts, local: bool) -> Check | None:
    if not (facts.exists and not facts.is_dir):
        return None
    return Check(_name(facts), FAIL, f"{facts.what} {facts.path} exists and is not a directory",
                 f"move it away (lockrun creates {_quoted(facts)} as a directory, mode 0700), or set LOCKRUN_STATE_DIR")


def _read_only(facts: DirectoryFacts, local: bool) -> Check | None:
    if not facts.read_only:
        return None
    return Check(_name(facts), FAIL, f"{facts.what} {facts.path} is on a read-only file system ({_fs(facts)})",
                 "set LOCKRUN_STATE_DIR (or state_dir in the config file) to a writable directory")


def _owned_by_another(facts: DirectoryFacts, local: bool) -> Check | None:
    if not (facts.exists and facts.uid not in (0, facts.our_uid)):
        return None
    return Check(_name(facts), FAIL, f"{facts.what} {facts.path} is owned by uid {facts.uid}, not by you (uid"
                                     f" {facts.our_uid}) or root: runs refuse it (its owner could plant links in it)",
                 f"chown {facts.our_uid} {_quoted(facts)}")


def _writable_by_others(facts: DirectoryFacts, local: bool) -> Check | None:
    mode = facts.mode or 0
    if not (facts.exists and mode & 0o022):
        return None
    return Check(_name(facts), FAIL, f"{facts.what} {facts.path} is writable by group or others (mode {mode:04o}):"
                                     " runs refuse it (they could plant links in it and make lockrun write through"
                                     " them)", f"chmod 700 {_quoted(facts)}")


def _on_a_network(facts: DirectoryFacts, local: bool) -> Check | None:
    if (facts.fs_type or "") not in NETWORK_FILE_SYSTEMS:
        return None
    what = ("kernel locks there do not exclude runs on other hosts, and may not work at all" if local
            else "SQLite's locking of the ledger is not reliable there")
    fix = "set LOCKRUN_STATE_DIR (or state_dir) to a local disk"
    return Check(_name(facts), FAIL if local else WARN,
                 f"{facts.what} {facts.path} is on a network file system ({_fs(facts)}): {what}",
                 fix + ("; for locks across hosts, configure a Redis URL" if local else ""))


def _readable_by_others(facts: DirectoryFacts, local: bool) -> Check | None:
    mode = facts.mode or 0
    if not (facts.exists and mode & 0o077):
        return None
    return Check(_name(facts), WARN, f"{facts.what} {facts.path} may be read by group or others (mode {mode:04o}):"
                                     " lock names, commands and the ledger's output tails are private",
                 f"chmod 700 {_quoted(facts)}")


#: What a run refuses (FAIL), then what it accepts but should not rely on (WARN), in the order
#: a person should fix them: the first that finds something is the check.
RULES = (_unreadable, _unsafe_above, _not_a_directory, _read_only, _owned_by_another, _writable_by_others,
         _on_a_network, _readable_by_others)


def _usable(facts: DirectoryFacts, local: bool) -> Check:
    """A directory runs can use: OK, or (in memory, with the local backend's locks) a WARN."""
    owner = (f"owned by {'root' if facts.uid == 0 else f'uid {facts.uid}'}, mode {(facts.mode or 0):04o}"
             if facts.exists else "does not exist yet: the first run creates it, mode 0700")
    seen = f"{facts.what} {facts.path}: {owner}, on {_fs(facts)}"
    if (facts.fs_type or "") in MEMORY_FILE_SYSTEMS:
        lost = "--once marks, fencing counters and the ledger" if local else "the ledger"
        return Check(_name(facts), WARN if local else OK, f"{seen}: {lost} are forgotten at reboot",
                     "set LOCKRUN_STATE_DIR (or state_dir) to a directory on a disk" if local else None)
    return Check(_name(facts), OK, seen)
