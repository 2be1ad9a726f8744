"""``lockrun doctor``'s ACL check (docs/redis.md "What lockrun needs of Redis"): may lockrun's user
send every command lockrun sends, on the keys it sends them on? The server's answers, one
:class:`AclTrial` per command (and key), become one Check and the ``ACL SETUSER`` line that fixes it.
"""

from __future__ import annotations

from collections.abc import Iterable

from lockrun.backends.audit import AclFacts, AclTrial, Need
from lockrun.views.doctor_check import FAIL, OK, WARN, Check, said


def acl(facts: AclFacts, prefix: str) -> Check:
    """Whether lockrun's user may send every command lockrun sends, on the keys it sends them on.

    ACL DRYRUN says whether a refusal is about the command or the key; redis.acl_check_cmd only
    says no, so a key is judged by EVAL with that key declared (EVAL without one allowed), and a
    command by its refusal on a key that is not refused."""
    who = f"user {facts.user}" if facts.user else "lockrun's user"
    if facts.everything:
        return Check("acl", OK, f"{who} may run every command on every key ({facts.how})")
    bad_keys = _refused_keys(facts.trials)
    refused = _in_order(trial.command for trial in facts.trials if _refused_for_command(trial, bad_keys))
    problems = _refusals(who, refused, bad_keys, facts) + _unasked(facts)
    if not problems:
        return Check("acl", OK, f"{who} may run every command lockrun sends, on its keys ({facts.how},"
                                f" {len({trial.command for trial in facts.trials})} commands)")
    return _refused_check(facts, problems, refused, bad_keys, prefix)


def _refused_check(facts: AclFacts, problems: list[str], refused: list[str], bad_keys: set[str],
                   prefix: str) -> Check:
    """FAIL when a run needs what is refused (a key, or a command a run sends), else WARN; the fix."""
    status = FAIL if bad_keys or _runs_need_any(refused, facts.needed) else WARN
    return Check("acl", status, f"{'; '.join(problems)} (asked with {facts.how or 'nothing'})",
                 _fix(facts.user or "USER", _rules(refused, bad_keys, prefix)))


def not_found(trial: AclTrial) -> bool:
    """The server does not know the command (renamed, disabled, too old), rather than refusing it."""
    words = trial.why.lower()
    return "not found" in words or "invalid command" in words or "unknown command" in words


def _in_order(names: Iterable[str]) -> list[str]:
    """Each name once, in the order the trials were asked."""
    return list(dict.fromkeys(names))


def _refused_keys(trials: tuple[AclTrial, ...]) -> set[str]:
    """The keys the user may not use: those ACL DRYRUN names, and (with redis.acl_check_cmd) those
    EVAL is refused with while EVAL without a key is allowed."""
    bad_keys = {key for trial in trials for key in _refused_key(trial)}
    if _keyless_eval_allowed(trials):
        bad_keys |= {trial.key for trial in trials if trial.key is not None and _eval_refused(trial)}
    return bad_keys


def _keyless_eval_allowed(trials: tuple[AclTrial, ...]) -> bool | None:
    """Whether EVAL without a key was allowed (None: not asked)."""
    return next((trial.allowed for trial in trials if trial.command == "EVAL" and trial.key is None), None)


def _eval_refused(trial: AclTrial) -> bool:
    """EVAL was refused without the server's words (redis.acl_check_cmd)."""
    return trial.command == "EVAL" and trial.allowed is False and not trial.why


def _refused_for_command(trial: AclTrial, bad_keys: set[str]) -> bool:
    """Refused, and not (only) for its key: the command is what the user may not run."""
    if trial.allowed is not False or _refused_key(trial):
        return False
    return _refused_command(trial) or trial.key is None or trial.key not in bad_keys


def _refusals(who: str, refused: list[str], bad_keys: set[str], facts: AclFacts) -> list[str]:
    problems = []
    if refused:
        problems.append(f"{who} may not run {_by_use(refused, facts.needed)}")
    if bad_keys:
        problems.append(f"{who} may not use {_keys_text(bad_keys, facts.registry)}")
    return problems


def _by_use(refused: list[str], needed: tuple[Need, ...]) -> str:
    """``HSET, EVAL (every run); SCAN (status, unlock, ...)``: the refused commands by who sends them."""
    uses = {need.command: need.uses for need in needed}
    by_use: dict[str, list[str]] = {}
    for name in refused:
        by_use.setdefault(uses.get(name, "lockrun"), []).append(name)
    return "; ".join(f"{', '.join(names)} ({use})" for use, names in by_use.items())


def _keys_text(bad_keys: set[str], registry: str | None) -> str:
    what = [f"{key} (the registry of names, which every run writes)" if key == registry else key
            for key in sorted(bad_keys)]
    return f"the key{'s' if len(what) > 1 else ''} {', '.join(what)}"


def _runs_need_any(refused: list[str], needed: tuple[Need, ...]) -> bool:
    """A run sends one of the refused commands (one lockrun does not list counts as a run's)."""
    runs_need = {need.command: need.runs for need in needed}
    return any(runs_need.get(name, True) for name in refused)


def _rules(refused: list[str], bad_keys: set[str], prefix: str) -> list[str]:
    """What ACL SETUSER needs: each refused command, and one key pattern for the refused keys."""
    # Every key lockrun writes starts with the prefix: one pattern covers them, the registry included.
    pattern = "~" + "".join("\\" + ch if ch in "*?[]\\" else ch for ch in prefix) + "*"
    return [f"+{name.lower()}" for name in refused] + ([pattern] if bad_keys else [])


def _unasked(facts: AclFacts) -> list[str]:
    """What could not be asked about: the ACL as a whole, or single commands."""
    problems = []
    if facts.unread:
        problems.append(f"could not ask about every command: {said(facts.unread)}")
    unasked = _in_order(trial.command for trial in facts.trials if trial.allowed is None and not not_found(trial))
    if unasked:
        problems.append(f"could not ask about {', '.join(unasked)}")
    return problems


def _fix(user: str, rules: list[str]) -> str:
    if rules:
        return f"ACL SETUSER {user} {' '.join(rules)}, and the same in the ACL file (ACL SAVE, or users.acl)"
    return (f"let {user} run ACL DRYRUN (ACL SETUSER {user} +acl|dryrun), or check its rules by hand against"
            " docs/redis.md \"What lockrun needs of Redis\"")


def _refused_key(trial: AclTrial) -> list[str]:
    """The key ACL DRYRUN says the user may not access, if that is what it said."""
    words = trial.why
    marker = "access the '"
    if trial.allowed is False and marker in words:
        return [words.split(marker, 1)[1].rsplit("' key", 1)[0]]
    return []


def _refused_command(trial: AclTrial) -> bool:
    return trial.allowed is False and "run the '" in trial.why
