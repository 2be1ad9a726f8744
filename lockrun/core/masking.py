"""The command line as lockrun records it: secrets masked (docs/fleet.md "What is published").

A crontab line often carries credentials (``pg_dump postgresql://app:pw@db/sales``, ``curl -H
'Authorization: Bearer …'``, ``env PGPASSWORD=… psql``). The command line lockrun records goes to
the fleet record, which every host and every user of that Redis can read, to ``history --fleet``
and ``status`` on every host, to webhooks and to the ledger; so it is masked first, once, by
:func:`mask_command`, and every record of the run keeps the masked argv. The rules:

- the password of a URL: ``scheme://user:***@host``;
- the value of an option that names a secret (secret_names.is_secret_name): ``--password=***``,
  ``--token ***``, ``-password ***``;
- ``NAME=***`` where NAME names a secret (``PGPASSWORD=``, ``AWS_SECRET_ACCESS_KEY=``, a query
  string's ``?token=``, a DSN's ``password=``), as an argument of its own or inside one;
- a header whose name names a secret: ``Authorization: Bearer ***``, ``X-Api-Key: ***``,
  ``Cookie: ***``; and a JSON string under such a key (``{"token": "***"}``);
- the options of a few clients whose password option is a short one (secret_names.CLIENT_OPTIONS),
  after the client's name:
  ``mysql -p***``, ``redis-cli -a ***``, ``curl -u user:***``, ``sshpass -p ***``, …;
- the user's own rules (config ``redact``: masking_rules.parse_masking).

The same rules apply inside an argument that is a shell script (``sh -c 'curl -u a:b …'``): its
words are read as argv words, and a control operator (``|``, ``&&``, ``;``, also attached:
``cd /x;mysql``) or the start of a command substitution or subshell (``$(``, a backquote, ``(``)
ends a client's options. Each masked value becomes ``***`` (the fleet record's entries hold the command as a
number into ``vals``: their 132 bytes per run, bench/RESULTS.md, do not change), and masking twice
changes nothing. Masking errs towards hiding: a flag whose next
word is not its value (``psql --password db``) hides that word.

Pure and standard library only: the run path imports it for every run, the tests call it directly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from lockrun.core.secret_names import (
    AUTH_SCHEMES,
    BUILT_IN,
    CLIENT_FLAG_LETTERS,
    CLIENT_OPTIONS,
    Masking,
    is_secret_name,
    normal_name,
)

#: What a masked value becomes.
MASK = "***"

# The patterns are compiled when first used (re's own cache keeps them): a plain command line,
# most of them, needs none, and a run does not pay for compiling them at start-up.
# A URL's scheme and "://" (its authority follows, up to / ? # or a space).
_URL = r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{0,30}://"
# NAME= (an option's --NAME= too; a DSN's password = x too), not inside a longer word.
_ASSIGNMENT = r"(?<![A-Za-z0-9_.\-])(-{0,2}[A-Za-z_][A-Za-z0-9_.\-]*)[ \t]*=[ \t]*"
# Name: value, as a header is written (not scheme://); also attached to curl's -H (-HAuthorization: …).
_HEADER = r"(?:(?<=^-H)|(?<=[\s'\"]-H)|(?<![A-Za-z0-9_.\-]))([A-Za-z][A-Za-z0-9_\-]*)[ \t]*:(?!//)[ \t]*"
# "key": "value" in JSON.
_JSON_PAIR = r'"([^"\\]{1,100})"\s*:\s*"((?:[^"\\]|\\.)*)"'
# A word of a script: quoted parts belong to it, spaces and all ('a b' is one word), with what
# a backslash escapes ("a\"b", $'a\'b', a\ b); or a run of
# the characters that end or begin a command (cd /x;mysql, $(mysql, `mysql, (mysql), but not a
# redirection's >& (2>&1).
_WORD = r"""(?:\$'(?:[^'\\]|\\.)*'?|'[^']*'?|"(?:[^"\\]|\\.)*"?|\\.|[<>]&|[^\s'";|&()`\\])+|[;|&()`]+"""
_OPERATOR_CHARACTERS = frozenset(";|&()`")
# Where an unquoted value inside a longer text ends.
_QUERY_VALUE_END = r"[\s'\"&#]"
_DSN_VALUE_END = r"[\s'\";]"
_QUOTES = "'\""
_AUTH_SCHEME = r"([A-Za-z][A-Za-z0-9\-]*)[ \t]+(?=\S)"  # Bearer, Basic: kept before the credential


def _script_flag(arg: str) -> bool:
    """``-c`` (sh -c, bash -lc, su -c): the next argument is a script."""
    return len(arg) >= 2 and arg[0] == "-" and arg[-1] == "c" and arg[1:].isascii() and arg[1:].isalpha()


def mask_command(argv: Sequence[str], masking: Masking = BUILT_IN) -> list[str]:
    """``argv`` as lockrun records it: every secret the rules find replaced by ``***``; with
    ``record_command = false``, the program alone (masked too)."""
    args = list(argv[:1]) if not masking.record_command else list(argv)
    spans = [_text_spans(arg, masking, i > 0 and _script_flag(args[i - 1]))
             for i, arg in enumerate(args)]
    _word_spans(args, masking, spans)
    for i, found in enumerate(spans):
        if found:
            args[i] = _masked(args[i], found)
    return args


# -- spans found in the text of one argument -----------------------------------------------------


def _text_spans(text: str, masking: Masking, after_script_flag: bool = False) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    if "://" in text:
        spans += _url_spans(text)
    if "=" in text:
        spans += _assignment_spans(text, masking, after_script_flag)
    if ":" in text:
        spans += _header_spans(text, masking)
        if '"' in text:
            spans += _json_spans(text, masking)
    for pattern in masking.patterns:
        spans += _pattern_spans(pattern, text)
    return spans


def _url_spans(text: str) -> Iterable[tuple[int, int]]:
    word_end = -1
    for match in re.finditer(_URL, text):
        start = match.end()  # the authority: up to the first / ? # or space
        if word_end < start:  # (found once per word: a word may hold several URLs, a,b://…)
            word_end = _found_or_end(r"\s", text, start)
        password = _url_password(text, start, word_end)
        if password is not None:
            yield password


def _found_or_end(pattern: str, text: str, start: int) -> int:
    """Where ``pattern`` is first found from ``start``, else the text's end."""
    found = re.compile(pattern).search(text, start)
    return found.start() if found else len(text)


def _url_password(text: str, start: int, word_end: int) -> tuple[int, int] | None:
    """The password of the URL whose authority begins at ``start`` (user:PASSWORD@host), if it has one."""
    ends = [i for i in (text.find(c, start, word_end) for c in "/?#") if i >= 0]
    authority_end = min(ends, default=word_end)
    at = text.rfind("@", start, authority_end)
    colon = text.find(":", start, authority_end if at < 0 else at)
    if at < 0:
        at = _raw_password_end(text, colon, authority_end, word_end)
    return (colon + 1, at) if 0 <= colon < at - 1 else None


def _raw_password_end(text: str, colon: int, authority_end: int, word_end: int) -> int:
    """A password with a raw / ? or # (invalid, but written): user:pa/ss@host, up to the word's
    last @ (-1: none). Not a port (host:8080/x@y)."""
    at = text.rfind("@", authority_end, word_end)
    if colon < 0 or at < 0 or text[colon + 1:authority_end].isdigit():
        return -1
    return at


def _value_end(text: str, start: int, after: str) -> int:
    """Where a value that begins at ``start`` inside a longer text ends: after ``?`` or ``&`` (a
    query string) at an ``&``, ``#``, space or quote, after ``;`` (a DSN) at a ``;``, space or
    quote (a quoted value: its closing quote); elsewhere (a script) at the end of its shell word,
    its quoted and escaped parts and all (TOKEN=$'a b', TOKEN="a\\"b c", TOKEN=a\\ b)."""
    if after and after in "?&;":
        if start < len(text) and text[start] in _QUOTES:
            close = text.find(text[start], start + 1)
            return len(text) if close < 0 else close + 1
        return _found_or_end(_QUERY_VALUE_END if after in "?&" else _DSN_VALUE_END, text, start)
    word = re.compile(_WORD).match(text, start)
    return word.end() if word is not None and text[start] not in _OPERATOR_CHARACTERS else start


def _assignment_spans(text: str, masking: Masking, after_script_flag: bool) -> Iterable[tuple[int, int]]:
    for match in re.finditer(_ASSIGNMENT, text):
        name = match.group(1)
        if not (is_secret_name(name, masking) or name in masking.options or _private_key_variable(name)):
            continue
        start, end = match.end(), _assigned_value_end(text, match, after_script_flag)
        if end > start:
            yield start, end


def _private_key_variable(name: str) -> bool:
    """``PRIVATE_KEY=…``, ``SSH_PRIVATE_KEY=…``: a variable holds the key itself (``--private-key``
    names a file, and is left alone)."""
    return not name.startswith("-") and normal_name(name).endswith("private_key")


def _assigned_value_end(text: str, match: re.Match[str], after_script_flag: bool) -> int:
    """An argument that is the assignment (env PGPASSWORD=a b, --passphrase=a b c) hides all of
    its value; inside a script (sh -c 'TOKEN=x job') or a longer text, the value is a word."""
    if match.start() == 0 and not after_script_flag:
        return len(text)
    return _value_end(text, match.end(), text[match.start() - 1] if match.start() > 0 else "")


def _header_spans(text: str, masking: Masking) -> Iterable[tuple[int, int]]:
    stop = -1  # the end of the line an unquoted header is on (found once per stretch)
    for match in re.finditer(_HEADER, text):
        if not _is_secret_header(text, match, masking):
            continue
        start = match.end()
        quote = text[match.start() - 1] if match.start() > 0 and text[match.start() - 1] in _QUOTES else ""
        if quote:  # 'Authorization: Bearer …' in a script: its closing quote ends it
            close = text.find(quote, start)
            end = len(text) if close < 0 else close
        else:  # an argument of its own (any character is the value's), or unquoted: the line's end
            stop = stop if stop >= start else _found_or_end(r"\n", text, start)
            end = stop
        start = _after_auth_scheme(text, start, end)
        if end > start:
            yield start, end


def _is_secret_header(text: str, match: re.Match[str], masking: Masking) -> bool:
    """A header whose name names a secret; not a URL's user name (https://x-token:…@host: the
    URL's rule hides its password)."""
    return is_secret_name(match.group(1), masking) and text[max(0, match.start() - 3):match.start()] != "://"


def _after_auth_scheme(text: str, start: int, end: int) -> int:
    """Where the credential of a header's value begins: after its scheme (Bearer, Basic), if any."""
    scheme = re.compile(_AUTH_SCHEME).match(text, start, end)
    return scheme.end() if scheme and scheme.group(1).lower() in AUTH_SCHEMES else start


def _json_spans(text: str, masking: Masking) -> Iterable[tuple[int, int]]:
    for match in re.finditer(_JSON_PAIR, text):
        if is_secret_name(match.group(1), masking) and match.end(2) > match.start(2):
            yield match.start(2), match.end(2)


def _pattern_spans(pattern: re.Pattern[str], text: str) -> Iterable[tuple[int, int]]:
    for match in pattern.finditer(text):
        groups = range(1, pattern.groups + 1) if pattern.groups else (0,)
        for group in groups:
            start, end = match.span(group)
            if end > start >= 0:
                yield start, end


# -- spans found in words: options and their values ------------------------------------------------


class _Word(NamedTuple):
    arg: int  # which argument
    start: int  # where its text begins in that argument, its quotes left out
    end: int
    whole: bool  # the word is its argument (not one word of a script)

    def text(self, args: list[str]) -> str:
        return args[self.arg][self.start:self.end]


def _words(args: list[str]) -> list[_Word]:
    words = []
    for i, arg in enumerate(args):
        # One word: an argument without spaces, or an option and its attached value (-p'a b').
        if arg.startswith("-") or not any(c.isspace() for c in arg):
            words.append(_Word(i, 0, len(arg), True))
        else:
            words += _script_words(i, arg)
    return words


def _script_words(i: int, arg: str, start: int = 0, end: int | None = None, depth: int = 0) -> Iterable[_Word]:
    """The words of the argument ``i`` (of ``arg[start:end]``) read as a script, each without its
    quotes; the script after ``-c`` inside it is read as a script too (sh -c "bash -c 'mysql -p…'")."""
    previous = ""
    for match in re.compile(_WORD).finditer(arg, start, len(arg) if end is None else end):
        first, last = match.span()
        while first < last and arg[first] in _QUOTES:
            first += 1
        while last > first and arg[last - 1] in _QUOTES:
            last -= 1
        text = arg[first:last]
        if depth < MAX_NESTED_SCRIPTS and _script_flag(previous) and any(c.isspace() for c in text):
            yield from _script_words(i, arg, first, last, depth + 1)
        else:
            yield _Word(i, first, last, False)
        previous = text


#: How deep scripts inside scripts are read (sh -c "ssh h 'bash -c …'"): deeper ones are one word.
MAX_NESTED_SCRIPTS = 3


def _word_spans(args: list[str], masking: Masking, spans: list[list[tuple[int, int]]]) -> None:
    words = _words(args)
    client: dict[str, frozenset[str]] = {}  # option -> how its value hides a secret, by the clients named
    skip_arg = -1  # an argument that is an option's whole value: its words are not read as options
    for n, word in enumerate(words):
        if word.arg == skip_arg:
            continue
        text = word.text(args)
        program = text.rpartition("/")[2]
        if _ends_a_command(word, text):
            client = {}
        elif program in CLIENT_OPTIONS:
            _name_client(client, program)
        else:
            found = _option_value(args, words, n, client, masking)
            if found is None:
                continue
            value, hows = found
            if value.arg != word.arg:
                skip_arg = value.arg
            _add(spans, value.arg, _secret_part(args[value.arg], value.start, value.end, hows))


def _ends_a_command(word: _Word, text: str) -> bool:
    """A control operator of a script, or the ``(`` or backquote before a command in it."""
    return not word.whole and bool(text) and set(text) <= _OPERATOR_CHARACTERS


def _name_client(client: dict[str, frozenset[str]], program: str) -> None:
    """Added to, not replaced: a word that names a client may be an argument (sudo -u mysql,
    redis-cli … 7z); where two read one option differently, both readings hide."""
    for option, how in CLIENT_OPTIONS[program].items():
        client[option] = client.get(option, frozenset()) | {how}
    client[_FLAG_LETTERS] = client.get(_FLAG_LETTERS, frozenset()) | set(CLIENT_FLAG_LETTERS.get(program, ""))


#: The key of ``client`` that holds the one-letter options that take no value (never an option: no dash).
_FLAG_LETTERS = "flag letters"


_VALUE = frozenset({"value"})
_NO_HOW: frozenset[str] = frozenset()


def _hows(option: str, client: dict[str, frozenset[str]], masking: Masking) -> frozenset[str]:
    """How the value of ``option`` hides a secret: by the clients named so far and the user's rules."""
    return client.get(option, _NO_HOW) | (_VALUE if option in masking.options else _NO_HOW)


def _option_value(
    args: list[str], words: list[_Word], n: int, client: dict[str, frozenset[str]], masking: Masking,
) -> tuple[_Word, frozenset[str]] | None:
    """Where the value of the option ``words[n]`` is, and how it hides a secret (no way: it hides
    nothing); None when the word is no option or its value is not masked."""
    word = words[n]
    text = word.text(args)
    if len(text) < 2 or text[0] != "-":
        return None
    found = _one_letter_value(args, words, n, client, masking)
    if found is not None:
        return found
    name, equals, _ = text.partition("=")
    if equals:  # --name=SECRET
        return word._replace(start=word.start + len(name) + 1), _hows(name, client, masking) - {"attached"}
    return _separate_value(args, words, n, client, masking)


def _one_letter_value(
    args: list[str], words: list[_Word], n: int, client: dict[str, frozenset[str]], masking: Masking,
) -> tuple[_Word, frozenset[str]] | None:
    """The value of a one-letter option that hides a secret, in a word of them: ``-pSECRET``,
    ``-p=SECRET``, ``-fsSuUSER:PW``, or the next word after ``-fsSu``; None: none found here."""
    word = words[n]
    text = word.text(args)
    at = _secret_letter(text, client, masking)
    hows = _hows(f"-{text[at]}", client, masking) if at else _NO_HOW
    if hows and at + 1 < len(text):
        return word._replace(start=word.start + at + 1 + (text[at + 1] == "=")), hows
    if hows and at > 1 and hows != {"attached"}:
        following = _following(args, words, n, word)
        return None if following is None else (following, hows - {"attached"})
    return None


def _secret_letter(text: str, client: dict[str, frozenset[str]], masking: Masking) -> int:
    """Where, in a word of one-letter options (``-p…``, ``-fsSu…``), the one whose value hides a
    secret is: after none or only letters that take no value; 0: none."""
    if text[1] == "-":
        return 0
    flags = client.get(_FLAG_LETTERS, _NO_HOW)
    for at in range(1, len(text)):
        if _hows(f"-{text[at]}", client, masking):
            return at
        if text[at] not in flags:
            return 0
    return 0


def _separate_value(
    args: list[str], words: list[_Word], n: int, client: dict[str, frozenset[str]], masking: Masking,
) -> tuple[_Word, frozenset[str]] | None:
    """The value after the option ``words[n]`` (``--token SECRET``), if the option hides one."""
    text = words[n].text(args)
    hows = (_hows(text, client, masking) | (_VALUE if is_secret_name(text, masking) else _NO_HOW)) - {"attached"}
    following = _following(args, words, n, words[n]) if hows else None
    return None if following is None else (following, hows)


def _following(args: list[str], words: list[_Word], n: int, word: _Word) -> _Word | None:
    """The value of the option ``words[n]``: all of the next argument after an argument (spaces and
    all: ``--password 'a b'``), the next word of a script."""
    if word.whole:
        return _Word(word.arg + 1, 0, len(args[word.arg + 1]), True) if word.arg + 1 < len(args) else None
    nxt = words[n + 1] if n + 1 < len(words) else None
    return nxt if nxt is not None and nxt.arg == word.arg else None


def _secret_part(text: str, start: int, end: int, hows: frozenset[str]) -> tuple[int, int] | None:
    """What to hide of a value at ``text[start:end]``: all of it, or its password after the first
    separator of a ``user<sep>password`` value (several: the earliest)."""
    if hows & {"value", "attached"}:
        return (start, end) if end > start else None
    seps = [found for found in (text.find(sep, start, end) for sep in hows) if found >= 0]
    sep = min(seps, default=-1)
    return (sep + 1, end) if 0 <= sep < end - 1 else None


def _add(spans: list[list[tuple[int, int]]], arg: int, span: tuple[int, int] | None) -> None:
    if span is not None and span[1] > span[0]:
        spans[arg].append(span)


def _masked(text: str, spans: list[tuple[int, int]]) -> str:
    out, at = [], 0
    for start, end in sorted(spans):
        if end <= at:
            continue
        start = max(start, at)
        out.append(text[at:start])
        out.append(MASK)
        at = end
    out.append(text[at:])
    return "".join(out)
