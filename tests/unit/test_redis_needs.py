"""``lockrun doctor`` asks the ACL about every command lockrun sends (backends/redis/needs.py): the
list must not fall behind the code that sends them."""

from __future__ import annotations

import re
from pathlib import Path

from lockrun.backends.redis import needs as needs_module
from lockrun.backends.redis.needs import ASKED_WITH, RUN_SCRIPTS, arguments, needs, script_commands

REDIS_PACKAGE = Path(needs_module.__file__).parent
#: redis-py's methods (on a client or a pipeline) and the command each sends.
METHODS = {"eval": "EVAL", "get": "GET", "pttl": "PTTL", "type": "TYPE", "exists": "EXISTS", "hgetall": "HGETALL",
           "hmget": "HMGET", "lrange": "LRANGE", "xrange": "XRANGE", "xrevrange": "XREVRANGE", "zrange": "ZRANGE",
           "zrangebyscore": "ZRANGEBYSCORE", "delete": "DEL", "time": "TIME", "scan_iter": "SCAN", "info": "INFO",
           "ping": "PING"}
#: What only ``lockrun doctor`` sends, read-only, and need not be granted for runs.
DOCTOR_ONLY = {"DBSIZE", "ROLE", "HELLO", "COMMAND", "CONFIG", "ACL", "SENTINEL", "CLUSTER"}


def test_every_command_a_script_runs_is_asked_about_with_the_right_arguments() -> None:
    listed = {need.command for need in needs(replicas=True)}
    every_script = "".join(path.read_text() for path in REDIS_PACKAGE.glob("*.py"))
    in_scripts = {match.upper() for match in re.findall(r"""redis\.p?call\(\s*['"]([A-Za-z]+)['"]""", every_script)}
    assert in_scripts <= listed, in_scripts - listed
    assert in_scripts - {"EVAL"} <= set(ASKED_WITH), in_scripts - set(ASKED_WITH)  # ACL DRYRUN checks arity


def test_every_command_the_client_sends_is_listed() -> None:
    listed = {need.command for need in needs(replicas=True)}
    sent: set[str] = set()
    for path in REDIS_PACKAGE.glob("*.py"):
        source = path.read_text()
        sent |= {METHODS[name] for name in re.findall(r"\b(?:client|pipe|_client)\.([a-z_]+)\(", source)
                 if name in METHODS}
        sent |= set(re.findall(r"""execute_command\(\s*["']([A-Z]+)["']""", source))
        sent |= {name for name in re.findall(r"""\(\s*["']([A-Z]+)["'],""", source)
                 if name.isupper() and len(name) > 2}
    assert {"EVAL", "BLPOP", "WAIT", "ROLE", "ZRANGE", "SCAN", "XREVRANGE", "DEL"} <= sent  # the search finds them
    assert (sent - DOCTOR_ONLY) <= listed, (sent - DOCTOR_ONLY) - listed


def test_run_commands_come_first_and_are_needed_by_runs() -> None:
    listed = needs(replicas=False)
    assert listed[0].command == "EVAL" and listed[0].runs
    assert {need.command for need in listed if need.runs} >= script_commands(*RUN_SCRIPTS) | {"EVAL", "BLPOP"}
    by_name = {need.command: need for need in listed}
    assert not by_name["WAIT"].runs and needs(replicas=True)[0].runs
    assert {need.command: need.runs for need in needs(replicas=True)}["WAIT"]
    assert not by_name["SCAN"].keyed and by_name["HSET"].keyed and by_name["EVAL"].keyed


def test_arguments_put_the_key_where_the_command_takes_it() -> None:
    assert arguments("BLPOP", "k") == ("BLPOP", "k", "1")
    assert arguments("EVAL", "k") == ("EVAL", "return 1", "1", "k")
    assert arguments("EVAL", None) == ("EVAL", "return 1", "0")
    assert arguments("INFO", None) == ("INFO", "memory")
    assert arguments("XADD", "k") == ("XADD", "k", "*", "f", "v")
