"""Text from the kernel that is not valid UTF-8: escaped for records, shown escaped to people."""

from __future__ import annotations

import json
import os

import pytest

from lockrun.core.os_text import escaped, escaped_all
from lockrun.core.printable import printable


@pytest.mark.parametrize("raw,shown", [
    (b"plain", "plain"), (b"\xff", "\\xff"), (b"a\xfeb\x80", "a\\xfeb\\x80"), ("naïve".encode(), "naïve"),
    (b"caf\xc3", "caf\\xc3"),  # half a UTF-8 sequence
])
def test_undecodable_bytes_become_their_escape(raw: bytes, shown: str) -> None:
    text = os.fsdecode(raw)  # as Python hands an argv, an environment value or a path to lockrun
    assert escaped(text) == shown
    assert escaped(shown) == shown  # escaping twice changes nothing
    escaped(text).encode("utf-8")  # storable anywhere: SQLite, redis-py, a UTF-8 stdout
    assert os.fsencode(text) == raw  # while the command itself still gets its own bytes


def test_other_lone_surrogates_and_nested_records() -> None:
    assert escaped("x\ud800") == "x\\ud800"
    record = {"command": [os.fsdecode(b"\xff"), "ok"], "note": None, "pid": 7, "pair": (os.fsdecode(b"\xfe"),)}
    assert escaped_all(record) == {"command": ["\\xff", "ok"], "note": None, "pid": 7, "pair": ("\\xfe",)}
    json.dumps(escaped_all(record), ensure_ascii=False).encode("utf-8")


def test_printable_shows_an_undecodable_byte_as_the_shell_would() -> None:
    assert printable(os.fsdecode(b"\xff: command not found")) == "\\xff: command not found"
    assert printable("\x1b[2J" + os.fsdecode(b"\xfe")) == "\\x1b[2J\\xfe"


def test_a_command_is_shown_as_a_shell_would_take_it_back() -> None:
    from lockrun.core.printable import command_line

    assert command_line(["sh", "-c", "sleep 30"]) == "sh -c 'sleep 30'"
    assert command_line(["echo", "it's", ""]) == "echo 'it'\"'\"'s' ''"
    assert command_line([]) == "-" and command_line(None) == "-"
