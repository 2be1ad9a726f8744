"""What ``lockrun doctor`` reads of a backend (docs/operating.md "Checking the setup: lockrun
doctor"): plain values that ``Backend.audit`` gathers and ``views/doctor.py`` judges. Nothing here
says OK or FAIL.

A value the server would not give (a command renamed, denied by an ACL, unknown to this kind of
server) is an :class:`Unread` carrying the server's own words, never a default that would read
as a good answer.
"""

from __future__ import annotations

from typing import NamedTuple

from lockrun.system.directory import DirectoryFacts


class Unread(NamedTuple):
    """A value that could not be read, and why (the server's words, a password never among them)."""

    why: str


#: INFO fields of one section (values as text), or why the section could not be read.
InfoSection = dict[str, str] | Unread


class ClockReading(NamedTuple):
    """The server's TIME and this host's clock around the call that read it (epoch seconds)."""

    server_s: float
    sent_s: float
    received_s: float


class Need(NamedTuple):
    """One command lockrun sends, and who sends it (backends/redis/needs.py lists them)."""

    command: str  # upper case
    uses: str  # for a person: "every run", "--wait", "status, unlock, history --fleet"
    runs: bool  # a run sends it (so a run fails without it); else only the other commands do
    keyed: bool  # it names a key (the ACL's key patterns apply)


class AclTrial(NamedTuple):
    """May lockrun's user run ``command`` (on ``key``)? As the server answered."""

    command: str  # upper case, as lockrun sends it
    key: str | None  # the key it was asked about (None: a command without keys)
    allowed: bool | None  # None: the server does not know the command (renamed, disabled, too old)
    why: str = ""  # the server's words when not allowed or unknown


class AclFacts(NamedTuple):
    """What the server said of lockrun's user and the commands lockrun sends."""

    user: str | None  # ACL WHOAMI, else the URL's user name; None: unknown
    how: str  # how it was asked: "redis.acl_check_cmd", "ACL DRYRUN", "ACL GETUSER" or ""
    trials: tuple[AclTrial, ...] = ()
    unread: str | None = None  # why (some of) the commands could not be asked about
    everything: bool = False  # ACL GETUSER: the user may run every command on every key
    needed: tuple[Need, ...] = ()  # what lockrun sends, each command once
    registry: str | None = None  # the registry of names' key among the keys asked about (None on a Cluster)


class ServerFacts(NamedTuple):
    """One Redis server lockrun's names may land on (the server; each master of a Cluster)."""

    where: str  # as messages name it: the URL without its password, or a Cluster node
    connect_s: float | None  # the first call, connection and authentication included
    rtts_s: tuple[float, ...]  # PING round trips on the open connection
    info: dict[str, InfoSection]  # INFO by section: server, memory, persistence, replication
    config: dict[str, str | Unread]  # CONFIG GET by parameter
    role: tuple[str, ...] | Unread  # ROLE: ("master", "host:port", ...) or ("slave", "host:port", state)
    hello: dict[str, str] | Unread  # HELLO 2: server, version, mode, role (what INFO server may not say)
    script: str | Unread  # a one-line script's reply: scripting works
    clock: ClockReading | Unread
    unknown_commands: tuple[str, ...] | Unread  # of those lockrun sends: COMMAND INFO knows none of them
    acl: AclFacts


class SentinelFacts(NamedTuple):
    """What the Sentinels of a redis+sentinel:// URL say of its service."""

    service: str
    given: tuple[str, ...]  # the Sentinels the URL names
    silent: tuple[tuple[str, str], ...]  # (Sentinel, why) for those that did not answer
    masters: tuple[str, ...]  # the master addresses the answering Sentinels name (one when they agree)
    quorum: int | None
    flags: str  # the master's flags as the first answering Sentinel sees them ("master", "master,s_down"...)
    replicas: int | None  # replicas the Sentinels know for the master
    sentinels_known: int | None  # Sentinels the first answering one knows (itself included)


class ClusterFacts(NamedTuple):
    """What a Redis Cluster says of itself (CLUSTER INFO of the node first asked)."""

    state: str | Unread  # cluster_state: "ok" or "fail"
    slots_ok: int | None
    masters: tuple[str, ...]  # host:port of every master the slot map names


class Topology(NamedTuple):
    """The deployment behind the URL: ``kind`` "standalone", "sentinel" or "cluster"."""

    kind: str
    sentinel: SentinelFacts | None = None
    cluster: ClusterFacts | None = None


class ProbeFacts(NamedTuple):
    """``doctor --probe``: what two holders of a scratch name saw, and what it left behind.

    The steps run in order and stop at the first that raises (``failure`` says which)."""

    scratch: str  # what every name and key of the probe starts with
    ttl_s: float
    first_fence: int | None = None  # the first holder's fencing token
    contender: str = ""  # what the second holder got while the first held: "busy", "acquired" or ""
    renewal: str = ""  # the first holder's renewal: RENEWED, LOST, PREEMPTED (values.py) or ""
    second_fence: int | None = None  # the second holder's, after the hand-over
    handover_s: float | None = None  # from the first's release to the second's grant
    failure: str | None = None  # the step that raised, and the error
    keys_before: int | None = None  # DBSIZE (every master's) before the probe; files for the local backend
    keys_after: int | None = None
    written: tuple[str, ...] = ()  # what the probe found it had written, before removing it
    left: tuple[str, ...] = ()  # what it could not remove


class BackendAudit(NamedTuple):
    """Everything ``Backend.audit`` found; ``unreachable`` set: nothing else could be checked."""

    backend: str  # "redis" or "local"
    where: str  # the URL without its password, or the state directory
    unreachable: str | None = None
    topology: Topology | None = None
    servers: tuple[ServerFacts, ...] = ()
    directories: tuple[DirectoryFacts, ...] = ()  # the local backend's state and lock directories
    probe: ProbeFacts | None = None
