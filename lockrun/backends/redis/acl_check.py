"""May lockrun's Redis user run what lockrun sends? Asked without running any of it
(``lockrun doctor``, docs/redis.md "What lockrun needs of Redis").

Three ways, the first the server and the user allow:

1. ``ACL DRYRUN user COMMAND args…`` (Redis 7, Valkey): the server's own words for each refusal
   (the command, or the key); a user may be refused DRYRUN itself (it is an admin command);
2. ``redis.acl_check_cmd`` inside one script (Redis 7, Valkey), which any user who may run EVAL
   may call: allowed or not, without the reason;
3. ``ACL GETUSER`` (Redis 6): whether the user may run everything on every key; anything less
   cannot be judged command by command there.

A server without ACLs at all (before Redis 6) lets every client run every command.
"""

from __future__ import annotations

from redis.exceptions import ResponseError

from lockrun.backends.audit import AclFacts, AclTrial, Need
from lockrun.backends.redis.needs import arguments
from lockrun.backends.redis.raw import RawCalls
from lockrun.backends.redis.replies import text

# ARGV: for each trial, its argument count and then its arguments. Returns one reply per trial:
# 1 (allowed), 0 (refused), or the error text (an unknown command). {'-'} without acl_check_cmd.
ACL_CHECK_SCRIPT = """
if redis.acl_check_cmd == nil then return {'-'} end
local out, i = {}, 1
while i <= #ARGV do
  local count = tonumber(ARGV[i])
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(ARGV, i + 1, i + count))
  if not ok then
    if type(allowed) == 'table' then allowed = allowed.err end
    out[#out + 1] = tostring(allowed)
  else
    out[#out + 1] = allowed and 1 or 0
  end
  i = i + count + 1
end
return out
"""

Trial = tuple[str, str | None]  # (command, key)


def _refused_as_a_whole(reply: object) -> bool:
    """The reply of a DRYRUN that was itself refused or unknown (not an answer about the command)."""
    if not isinstance(reply, ResponseError):
        return False
    words = str(reply)
    return "acl|dryrun" in words or "unknown subcommand" in words.lower() or "unknown command" in words.lower()


def trials_for(needed: list[Need], keys: tuple[str, ...]) -> list[Trial]:
    """Each command on each key it may touch (keyless ones once), and EVAL without a key, which
    tells a refused command from refused keys."""
    found: list[Trial] = [("EVAL", None)]
    for need in needed:
        found += [(need.command, key) for key in keys] if need.keyed else [(need.command, None)]
    return found


def _by_dryrun(raw: RawCalls, user: str, trials: list[Trial]) -> list[AclTrial] | None:
    replies = raw.batch([("ACL", "DRYRUN", user, *arguments(command, key)) for command, key in trials])
    if not replies or _refused_as_a_whole(replies[0]):
        return None
    found = []
    for (command, key), reply in zip(trials, replies, strict=True):
        if isinstance(reply, ResponseError):  # "Command 'x' not found": renamed or disabled
            found.append(AclTrial(command, key, None, str(reply)))
        else:
            words = text(reply)
            found.append(AclTrial(command, key, words == "OK", "" if words == "OK" else words))
    return found


def _by_script(raw: RawCalls, trials: list[Trial]) -> list[AclTrial] | str | None:
    """The trials' answers; a string: EVAL itself was refused (its words); None: no acl_check_cmd."""
    argv: list[str] = []
    for command, key in trials:
        args = arguments(command, key)
        argv += [str(len(args)), *args]
    try:
        reply = raw.one("EVAL", ACL_CHECK_SCRIPT, 0, *argv)
    except ResponseError as exc:
        return str(exc)
    if not isinstance(reply, list) or reply == [b"-"] or len(reply) != len(trials):
        return None
    found = []
    for (command, key), answer in zip(trials, reply, strict=True):
        if isinstance(answer, int):
            found.append(AclTrial(command, key, bool(answer)))
        else:
            found.append(AclTrial(command, key, None, text(answer)))
    return found


def _by_getuser(raw: RawCalls, user: str | None) -> AclFacts:
    if user is None:
        return AclFacts(None, "", unread="the server names no user (ACL WHOAMI refused) and cannot be asked about"
                                          " each command (no ACL DRYRUN, no redis.acl_check_cmd)")
    try:
        reply = raw.one("ACL", "GETUSER", user)
    except ResponseError as exc:
        return AclFacts(user, "", unread=f"no ACL DRYRUN nor redis.acl_check_cmd on this server, and ACL GETUSER"
                                         f" was refused ({exc})")
    fields = dict(zip(reply[0::2], reply[1::2], strict=False)) if isinstance(reply, list) else {}
    listed = fields.get(b"flags")
    flags = {text(flag) for flag in listed} if isinstance(listed, list) else set()
    commands = text(fields.get(b"commands", b""))
    keys = fields.get(b"keys", b"")
    key_rules = " ".join(text(k) for k in keys) if isinstance(keys, list) else text(keys)
    every_command = "allcommands" in flags or commands.split() == ["+@all"]
    every_key = "allkeys" in flags or key_rules.split() == ["~*"]
    if every_command and every_key:
        return AclFacts(user, "ACL GETUSER", everything=True)
    return AclFacts(user, "ACL GETUSER", unread=f"this server cannot be asked about each command (no ACL DRYRUN, no"
                                                f" redis.acl_check_cmd: Redis 6); ACL GETUSER {user} says commands"
                                                f" {commands or '?'!r}, keys {key_rules or '?'!r}")


def acl_facts(raw: RawCalls, needed: list[Need], name_key: str, registry: str | None,
              url_user: str | None) -> AclFacts:
    """What the server says of the user's permission to send every command in ``needed``, on one of
    a name's keys (``name_key``) and on the registry of names (None on a Cluster: there is none)."""
    found = _asked(raw, needed, (name_key, registry) if registry else (name_key,), url_user)
    return found._replace(needed=tuple(needed), registry=registry)


def _asked(raw: RawCalls, needed: list[Need], keys: tuple[str, ...], url_user: str | None) -> AclFacts:
    try:
        user: str | None = text(raw.one("ACL", "WHOAMI"))
    except ResponseError as exc:
        if "unknown command" in str(exc).lower() and "acl" in str(exc).lower() and _no_acls(raw):
            return AclFacts(None, "no ACLs (before Redis 6)", everything=True)
        user = url_user
    trials = trials_for(needed, keys)
    if user is not None:
        answered = _by_dryrun(raw, user, trials)
        if answered is not None:
            return AclFacts(user, "ACL DRYRUN", tuple(answered))
    scripted = _by_script(raw, trials)
    if isinstance(scripted, list):
        return AclFacts(user, "redis.acl_check_cmd", tuple(scripted))
    if isinstance(scripted, str):  # EVAL refused: every run fails; nothing else can be asked
        return AclFacts(user, "EVAL", (AclTrial("EVAL", None, False, scripted),),
                        unread="with EVAL refused, only ACL DRYRUN could say, and it is refused too")
    return _by_getuser(raw, user)


def _no_acls(raw: RawCalls) -> bool:
    """A server older than Redis 6 (no ACL command at all), not one that renamed ACL: HELLO is 6+ too."""
    try:
        raw.one("HELLO", "2")
    except ResponseError as exc:
        return "unknown command" in str(exc).lower()
    return False
