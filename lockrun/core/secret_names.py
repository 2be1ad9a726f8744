"""What names a secret, and which clients hide one behind a short option: the words of the
built-in rules (docs/fleet.md "What is published"), and :class:`Masking`, the user's rules on top
of them (read from the config file by masking_rules.py). core/masking.py applies them.
"""

from __future__ import annotations

import re
from typing import NamedTuple

#: The last word of a name (``--db-password``, ``GITHUB_TOKEN``, ``X-Api-Key``) that makes it name
#: a secret; ``pwd`` only after another word (``MYSQL_PWD``, not the shell's ``PWD``).
SECRET_WORDS = frozenset({
    "password", "passwd", "passphrase", "pass", "secret", "secrets", "token", "apikey", "auth",
    "authorization", "cookie", "credential", "credentials", "bearer",
})
#: ... or the end of a name written as one word (``PGPASSWORD``, ``authtoken``, ``clientsecret``).
SECRET_SUFFIXES = ("password", "passwd", "passphrase", "secret", "token", "apikey")
#: ``key`` names a secret after one of these words (``api-key``, ``AWS_SECRET_ACCESS_KEY``,
#: ``Ocp-Apim-Subscription-Key``); not ``--private-key`` or ``--access-key``, which name a file or an id.
KEY_QUALIFIERS = frozenset({"api", "secret", "auth", "subscription", "master", "account", "encryption", "signing"})
#: A name that begins with one of these is a flag about a secret, not one: ``--no-password``, ``--ask-pass``.
NOT_SECRET_FIRST = frozenset({"no", "ask"})

#: Per client (the basename of its program), its options whose value is a secret, and how:
#: ``value`` (``-p SECRET``, ``-pSECRET``, ``-p=SECRET``), ``attached`` (only ``-pSECRET``: mysql's
#: ``-p`` alone asks for the password, and its next word is the database), or the separator after
#: which a ``user<sep>password`` value's password begins (curl's ``:``, smbclient's ``%``).
#: ``-p`` is a port for most other programs (psql, pg_dump, ssh, rsync): never masked there.
_MYSQL = {"-p": "attached"}
_MONGO = {"-p": "value"}
CLIENT_OPTIONS: dict[str, dict[str, str]] = {
    **dict.fromkeys(("mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlcheck", "mysqlshow", "mysqlslap",
                     "mysqlpump", "mysqlbinlog", "mariadb", "mariadb-dump", "mariadb-admin", "mariadb-import",
                     "mariadb-check", "mariadb-show", "mariadb-slap", "mariadb-binlog"), _MYSQL),
    **dict.fromkeys(("mongo", "mongosh", "mongodump", "mongorestore", "mongoexport", "mongoimport",
                     "mongostat", "mongotop", "mongofiles"), _MONGO),
    **dict.fromkeys(("redis-cli", "valkey-cli", "keydb-cli"), {"-a": "value"}),
    "sshpass": {"-p": "value"},
    "curl": {"-u": ":", "--user": ":", "-U": ":", "--proxy-user": ":", "-b": "value"},
    "docker": {"-p": "value"},  # docker login -p (also hides docker run -p's ports: hiding errs that way)
    **dict.fromkeys(("smbclient", "rpcclient", "smbcacls", "smbget"), {"-U": "%", "--user": "%"}),
    "lftp": {"-u": ","},
    **dict.fromkeys(("sqlcmd", "bcp", "mosquitto_pub", "mosquitto_sub"), {"-P": "value"}),
    **dict.fromkeys(("ldapsearch", "ldapmodify", "ldapadd", "ldapdelete", "ldapwhoami", "ldappasswd",
                     "ldapcompare", "ldapmodrdn"), {"-w": "value"}),
    "openssl": {"-passin": "value", "-passout": "value", "-k": "value"},
    **dict.fromkeys(("zip", "unzip"), {"-P": "value"}),
    **dict.fromkeys(("7z", "7za", "7zr"), {"-p": "attached"}),
}

#: Per client, its one-letter options that take no value, so that a cluster of them may end in a
#: secret one: ``curl -fsSu user:pw``, ``mysql -vpPW``. A letter not listed ends the reading
#: (``mysql -uphil``: the user name, not -p and a password).
CLIENT_FLAG_LETTERS: dict[str, str] = {
    "curl": "0123456#aBfGgIiJjkLlMNnOpqRSsVvZ",
    **dict.fromkeys(("mysql", "mysqldump", "mysqladmin", "mariadb", "mariadb-dump", "mariadb-admin"),
                    "BCEfGHiNnqrstVvWX"),
}

#: Header-style schemes kept in front of a masked credential (``Authorization: Bearer ***``).
AUTH_SCHEMES = frozenset({"basic", "bearer", "digest", "token", "negotiate", "ntlm", "oauth", "apikey", "bot",
                          "key", "ssws"})

class Masking(NamedTuple):
    """The user's rules (config ``redact`` and ``record_command``) on top of the built-in ones."""

    options: frozenset[str] = frozenset()  # "--api-key", "-k": exactly as the command writes them
    names: frozenset[str] = frozenset()  # normalized (see normal_name): "db_cred"
    patterns: tuple[re.Pattern[str], ...] = ()
    record_command: bool = True  # False: only the program's name is recorded


#: The built-in rules alone.
BUILT_IN = Masking()


def normal_name(name: str) -> str:
    """``db_cred`` for ``--db-cred``, ``DB.CRED`` or ``dbCred``: words by ``_``, ``-``, ``.`` or a
    capital after a small letter (``AccountKey``: ``account_key``, as Azure spells its secrets)."""
    return _CAMEL.sub("_", name.lstrip("-")).lower().replace("-", "_").replace(".", "_")


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def is_secret_name(name: str, masking: Masking = BUILT_IN) -> bool:
    """Whether an option, variable, header or JSON key called ``name`` holds a secret."""
    normal = normal_name(name)
    if normal in masking.names:
        return True
    words = [word for word in normal.split("_") if word]
    if not words or (words[0] in NOT_SECRET_FIRST and len(words) > 1):
        return False
    return _ends_in_a_secret(words)


def _ends_in_a_secret(words: list[str]) -> bool:
    """Whether a name's last word (``key``, ``pwd``: with the words before it) makes it name a secret."""
    last = words[-1]
    if last in SECRET_WORDS or last.endswith(SECRET_SUFFIXES):
        return True
    if last == "pwd":
        return len(words) > 1
    if "secret" in words[:-1] and "key" in words[words.index("secret"):]:  # SECRET_KEY_BASE (Rails)
        return True
    return last == "key" and any(word in KEY_QUALIFIERS for word in words[:-1])
