"""The command line as lockrun records it (core/masking.py, with the words of core/secret_names.py; the
user's rules: core/masking_rules.py):
what is masked, what is left, and the properties every record relies on: no secret survives,
masking twice changes nothing, a command line without secrets is kept as it is, and the record
does not grow."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockrun.core.masking import MASK, mask_command
from lockrun.core.masking_rules import MAX_REDACT_ENTRIES, parse_masking
from lockrun.core.secret_names import BUILT_IN, CLIENT_OPTIONS, Masking, is_secret_name


@pytest.mark.parametrize("argv,masked", [
    # URL passwords; a URL without one is left alone
    (["pg_dump", "postgresql://app:hunter2@db/sales"], ["pg_dump", "postgresql://app:***@db/sales"]),
    (["redis-cli", "-u", "redis://:pw@h:6379/0"], ["redis-cli", "-u", "redis://:***@h:6379/0"]),
    (["git", "clone", "https://x-access-token:ghs_abc@github.com/o/r.git"],
     ["git", "clone", "https://x-access-token:***@github.com/o/r.git"]),
    (["psql", "postgresql://app@db/sales"], ["psql", "postgresql://app@db/sales"]),
    (["curl", "https://host:8443/path/user@example.com"], ["curl", "https://host:8443/path/user@example.com"]),
    (["x", "redis://u:p@ss@h/0"], ["x", "redis://u:***@h/0"]),  # a raw @ in the password: the last @ ends it
    (["x", "redis://u:ab/cd@h/0"], ["x", "redis://u:***@h/0"]),  # a raw / in it
    (["x", "http://localhost:3000/users/@me"], ["x", "http://localhost:3000/users/@me"]),  # a port, not a password
    (["x", "--urls=a://u:p@h,b://v:q@i/0"], ["x", "--urls=a://u:***@h,b://v:***@i/0"]),  # two in one word
    # options that name a secret, in both forms; flags about a secret are left alone
    (["job", "--password=s3cret", "--db-password", "x y"], ["job", "--password=***", "--db-password", "***"]),
    (["job", "--token", "t", "--api-key=k", "--client-secret", "c", "-password", "p"],
     ["job", "--token", "***", "--api-key=***", "--client-secret", "***", "-password", "***"]),
    (["docker", "login", "--password-stdin", "-u", "me"], ["docker", "login", "--password-stdin", "-u", "me"]),
    (["ansible-playbook", "--ask-pass", "site.yml"], ["ansible-playbook", "--ask-pass", "site.yml"]),
    (["psql", "--no-password", "-h", "db"], ["psql", "--no-password", "-h", "db"]),
    (["job", "--password-file", "/etc/pw", "--token-file=/t"],
     ["job", "--password-file", "/etc/pw", "--token-file=/t"]),
    # assignments
    (["env", "PGPASSWORD=x", "MYSQL_PWD=y", "PWD=/srv", "psql"],
     ["env", "PGPASSWORD=***", "MYSQL_PWD=***", "PWD=/srv", "psql"]),
    (["env", "AWS_SECRET_ACCESS_KEY=a b", "AWS_ACCESS_KEY_ID=AKIA"],
     ["env", "AWS_SECRET_ACCESS_KEY=***", "AWS_ACCESS_KEY_ID=AKIA"]),
    (["curl", "https://h/x?token=abc&page=2"], ["curl", "https://h/x?token=***&page=2"]),
    (["psql", "host=db password=pw dbname=x"], ["psql", "host=db password=*** dbname=x"]),
    # headers and JSON
    (["curl", "-H", "Authorization: Bearer abc.def"], ["curl", "-H", "Authorization: Bearer ***"]),
    (["curl", "-H", "X-Api-Key: k1", "--header=Cookie: s=1"], ["curl", "-H", "X-Api-Key: ***", "--header=Cookie: ***"]),
    (["curl", "-d", '{"user": "u", "password": "p"}'], ["curl", "-d", '{"user": "u", "password": "***"}']),
    # clients whose password option is a short one; -p is a port elsewhere
    (["mysqldump", "-uroot", "-pSECRET", "db"], ["mysqldump", "-uroot", "-p***", "db"]),
    (["mysql", "-p", "db"], ["mysql", "-p", "db"]),  # mysql's -p alone asks; db is the database
    (["psql", "-p", "5432", "db"], ["psql", "-p", "5432", "db"]),
    (["rsync", "-pavz", "a", "b"], ["rsync", "-pavz", "a", "b"]),
    (["redis-cli", "-a", "pw", "ping"], ["redis-cli", "-a", "***", "ping"]),
    (["/usr/bin/sshpass", "-p", "pw", "ssh", "h"], ["/usr/bin/sshpass", "-p", "***", "ssh", "h"]),
    (["curl", "-u", "admin:pw", "--user=a:b", "-uc:d", "-u", "nopass"],
     ["curl", "-u", "admin:***", "--user=a:***", "-uc:***", "-u", "nopass"]),
    (["smbclient", "//s/x", "-U", "user%pw"], ["smbclient", "//s/x", "-U", "user%***"]),
    (["ldapsearch", "-w", "pw", "-b", "dc=x"], ["ldapsearch", "-w", "***", "-b", "dc=x"]),
    (["openssl", "enc", "-pass", "pass:xyz", "-passin", "env:V"], ["openssl", "enc", "-pass", "***", "-passin", "***"]),
    # inside a script: words, quotes kept together, a control operator ends a client's options
    (["sh", "-c", "FOO_TOKEN=xyz /opt/job --token 'a b' && mysql -pS db | gzip; rsync -pa x y"],
     ["sh", "-c", "FOO_TOKEN=*** /opt/job --token '***' && mysql -p*** db | gzip; rsync -pa x y"]),
    (["sh", "-c", "curl -H 'Authorization: Bearer abc' -u a:b https://x"],
     ["sh", "-c", "curl -H 'Authorization: Bearer ***' -u a:*** https://x"]),
    # a command begins after an operator written against it, in $( ), ( ) and backquotes
    (["sh", "-c", "cd /srv;mysql -pS1 db"], ["sh", "-c", "cd /srv;mysql -p*** db"]),
    (["sh", "-c", "echo $(mysql -pS2 db) `redis-cli -a S3 ping` (sshpass -p S4 ssh h)"],
     ["sh", "-c", "echo $(mysql -p*** db) `redis-cli -a *** ping` (sshpass -p *** ssh h)"]),
    (["sh", "-c", "mysql -pS5 db 2>&1; rsync -pa x y"], ["sh", "-c", "mysql -p*** db 2>&1; rsync -pa x y"]),
    # one-letter options run together, as crontabs write them; a user name is not a password
    (["curl", "-fsSu", "admin:pw", "-sSfuUSER:pw2"], ["curl", "-fsSu", "admin:***", "-sSfuUSER:***"]),
    (["mysql", "-vpPW", "-uphil", "db"], ["mysql", "-vp***", "-uphil", "db"]),
    (["mysql", "-vp", "db"], ["mysql", "-vp", "db"]),
    (["docker", "login", "-u", "me", "-p", "PW"], ["docker", "login", "-u", "me", "-p", "***"]),
    (["curl", "--oauth2-bearer", "T", "-b", "session=T"], ["curl", "--oauth2-bearer", "***", "-b", "***"]),
    # names spelled otherwise: camelCase, Rails' and a key's own variable; a DSN with spaces
    (["x", "Endpoint=h;AccountName=a;AccountKey=k1;Suffix=x"],
     ["x", "Endpoint=h;AccountName=a;AccountKey=***;Suffix=x"]),
    (["env", "SECRET_KEY_BASE=b", "SSH_PRIVATE_KEY=k", "job", "--private-key", "/k"],
     ["env", "SECRET_KEY_BASE=***", "SSH_PRIVATE_KEY=***", "job", "--private-key", "/k"]),
    (["psql", "host=db password = pw dbname=x"], ["psql", "host=db password = *** dbname=x"]),
    # a script's value is a shell word, quoted parts and all
    (["sh", "-c", "PGPASSWORD=$'pw x' psql; TOKEN=a'b c'd job"], ["sh", "-c", "PGPASSWORD=*** psql; TOKEN=*** job"]),
    (["sh", "-c", "TOKEN=abc;rm x"], ["sh", "-c", "TOKEN=***;rm x"]),
    # ... and what a backslash escapes: a quote inside quotes, a space
    (["sh", "-c", 'TOKEN="a\\"b S1" true; PGPASSWORD=p\\ S2 true; curl -u a:b\\ S3 h'],
     ["sh", "-c", "TOKEN=*** true; PGPASSWORD=*** true; curl -u a:*** h"]),
    (["sh", "-c", "export AWS_SECRET_ACCESS_KEY=$'ab\\'cd S4'"], ["sh", "-c", "export AWS_SECRET_ACCESS_KEY=***"]),
    # a script inside a script
    (["sh", "-c", "bash -c \"mysql -pS5 db; redis-cli -a S6\""],
     ["sh", "-c", "bash -c \"mysql -p*** db; redis-cli -a ***\""]),
    # curl's -H with its header attached
    (["curl", "-HAuthorization: Bearer abc"], ["curl", "-HAuthorization: Bearer ***"]),
    (["sh", "-c", "curl -H'X-Api-Key: k' https://x"], ["sh", "-c", "curl -H'X-Api-Key: ***' https://x"]),
    # a word that names a client may be an argument: the options of both hide
    (["curl", "lftp", "-u", "me:pw"], ["curl", "lftp", "-u", "me:***"]),
    (["redis-cli", "7z", "-a", "pw", "then", "-a", "pw2"], ["redis-cli", "7z", "-a", "***", "then", "-a", "***"]),
    (["mysql", "-pa b|c", "--password=x;y", "db"], ["mysql", "-p***", "--password=***", "db"]),
    (["curl", "-H", "Authorization: Bearer a'b\"c"], ["curl", "-H", "Authorization: Bearer ***"]),
    (["curl", "https://h/x?token=a;b&page=2"], ["curl", "https://h/x?token=***&page=2"]),
    # odd argv
    ([""], [""]),
    (["x", "=", "", "--token", "", "--password"], ["x", "=", "", "--token", "", "--password"]),
    (["x", "--password="], ["x", "--password="]),
    (["job\\xff", "--password=\\xffsecret"], ["job\\xff", "--password=***"]),
])
def test_what_is_masked(argv: list[str], masked: list[str]) -> None:
    assert mask_command(argv) == masked


@pytest.mark.parametrize("name,secret", [
    ("password", True), ("--db-password", True), ("PGPASSWORD", True), ("MYSQL_PWD", True), ("PWD", False),
    ("GITHUB_TOKEN", True), ("authtoken", True), ("X-Api-Key", True), ("Authorization", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("AWS_ACCESS_KEY_ID", False), ("--private-key", False), ("--key", False),
    ("--no-password", False), ("--ask-pass", False), ("--password-stdin", False), ("--bypass", False),
    ("--secret", True), ("client_secret", True), ("--cookie", True), ("REDISCLI_AUTH", True), ("user", False),
])
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_the_users_rules() -> None:
    rules = parse_masking(["--sig", "-k", "db_cred", r"re:sk_live_\w+", r"re:serial=(\d+)"])
    argv = ["job", "--sig", "a", "--sig=b", "-kc", "-k", "d", "DB-CRED=e", "--db-cred", "f", "pay sk_live_123 x",
            "serial=42 ok"]
    assert mask_command(argv, rules) == ["job", "--sig", "***", "--sig=***", "-k***", "-k", "***", "DB-CRED=***",
                                         "--db-cred", "***", "pay *** x", "serial=*** ok"]
    assert mask_command(["job", "--Sig", "a"], rules) == ["job", "--Sig", "a"]  # options are as the command spells them


def test_record_command_false_keeps_the_program_alone() -> None:
    rules = parse_masking([], record_command=False)
    assert mask_command(["/opt/app/bin/sync", "--since", "2d"], rules) == ["/opt/app/bin/sync"]
    assert mask_command(["https://u:p@h"], rules) == ["https://u:***@h"]
    assert mask_command([], rules) == []


@pytest.mark.parametrize("redact", [
    "--api-key", [1], [""], ["a b"], ["re:("], ["re:x*"], ["re:"], ["-"], ["x" * 201], ["--"],
    ["-x"] * (MAX_REDACT_ENTRIES + 1), {"a": 1},
])
def test_bad_rules_are_refused(redact: object) -> None:
    with pytest.raises(ValueError):
        parse_masking(redact)


def test_a_refusal_quotes_a_short_prefix() -> None:
    with pytest.raises(ValueError) as refused:
        parse_masking(["re:" + "(" * 100])
    assert len(str(refused.value)) < 200


def test_huge_arguments_are_masked_in_linear_time() -> None:
    # Not a timing assertion: a quadratic scan of these would not finish within the test's timeout.
    big = "a" * 1_000_000
    assert mask_command([big + "://x", "--password=" + big, big + "=" + big, big + ":" + big, '"' * 100_000])[1] == \
        "--password=***"
    assert mask_command(["sh", "-c", "-H 'password: x' " * 50_000])[2].count(MASK) == 50_000


# -- properties -------------------------------------------------------------------------------------

SECRET = st.text(alphabet=string.ascii_letters + string.digits, min_size=12, max_size=24).map(lambda s: "Zq" + s)
#: Where a secret goes in a command line; {} is the secret.
TEMPLATES = [
    ["pg_dump", "postgresql://app:{}@db/sales"], ["job", "--password={}"], ["job", "--token", "{}"],
    ["curl", "-H", "Authorization: Bearer {}"], ["curl", "-H", "X-Api-Key: {}"], ["env", "PGPASSWORD={}", "psql"],
    ["sh", "-c", "FOO_TOKEN={} /opt/job"], ["mysql", "-p{}", "db"], ["redis-cli", "-a", "{}"],
    ["curl", "-u", "me:{}", "https://h"], ["curl", "https://h/x?api_key={}&a=1"], ["x", '{{"secret": "{}"}}'],
    ["sh", "-c", "curl -s -H 'Authorization: token {}' https://h | jq ."], ["sshpass", "-p{}", "ssh", "h"],
    ["job", "--client-secret", "{}"], ["x", "amqp://guest:{}@mq:5672/"], ["x", "--nodes=r://a:b@h:1,r://c:{}@i:2/"],
]
PLAIN = st.text(alphabet=string.ascii_lowercase + string.digits + "/._,+", min_size=0, max_size=12)


@settings(max_examples=300, deadline=None)
@given(secret=SECRET, template=st.sampled_from(TEMPLATES), before=st.lists(PLAIN, max_size=3),
       after=st.lists(PLAIN, max_size=3))
def test_no_secret_survives(secret: str, template: list[str], before: list[str], after: list[str]) -> None:
    argv = [template[0], *before, *(arg.format(secret) for arg in template[1:]), *after]
    masked = mask_command(argv)
    assert all(secret not in arg for arg in masked), masked
    assert masked[0] == argv[0] and masked[-len(after) or len(masked):] == (after or [])  # what ran is still said


#: Secrets with symbols, where the rules take any character: an argument of their own, or the
#: rest of one. (A URL's password may hold what a URL allows unescaped in a password, and raw /.)
SYMBOLS = string.ascii_letters + string.digits + string.punctuation + " "
WHOLE_TEMPLATES = [
    ["job", "--password={}"], ["job", "--token", "{}"], ["env", "PGPASSWORD={}", "psql"],
    ["curl", "-H", "Authorization: Bearer {}"], ["curl", "-H", "X-Api-Key: {}"], ["redis-cli", "-a", "{}"],
    ["mysql", "-p{}", "db"], ["job", "--api-key", "{}", "--verbose"],
]
URL_PASSWORD = st.text(alphabet=string.ascii_letters + string.digits + "-._~!$&'()*+,;=%:/", min_size=12,
                       max_size=24).map(lambda s: "Zq" + s)


@settings(max_examples=300, deadline=None)
@given(secret=st.text(alphabet=SYMBOLS, min_size=12, max_size=24).map(lambda s: "Zq" + s),
       template=st.sampled_from(WHOLE_TEMPLATES))
def test_no_secret_survives_whatever_its_characters(secret: str, template: list[str]) -> None:
    masked = mask_command([arg.format(secret) for arg in template])
    assert all(secret not in arg for arg in masked), masked
    assert all("Zq" not in arg for arg in masked), masked  # no part of it either


@settings(max_examples=300, deadline=None)
@given(secret=URL_PASSWORD, scheme=st.sampled_from(["postgresql", "redis", "https", "amqp", "mongodb+srv"]))
def test_no_url_password_survives(secret: str, scheme: str) -> None:
    masked = mask_command(["job", f"{scheme}://app:{secret}@db.example:5432/sales?sslmode=require"])
    assert masked == ["job", f"{scheme}://app:***@db.example:5432/sales?sslmode=require"]


ANY_ARG = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | \
    st.sampled_from(["--password", "-p", "-pX", "=", "", "a:b@c", "x://u:p@h", "Authorization:", "mysql", "curl",
                     "-u", "&&", "'", '"', "TOKEN=", "sh", "-c"])


@settings(max_examples=500, deadline=None)
@given(argv=st.lists(ANY_ARG, max_size=8), record_command=st.booleans())
def test_masking_twice_changes_nothing_and_never_grows_much(argv: list[str], record_command: bool) -> None:
    rules = Masking(record_command=record_command)
    once = mask_command(argv, rules)
    assert mask_command(once, rules) == once
    assert len(once) == (len(argv) if record_command else min(1, len(argv)))
    for original, masked in zip(argv, once, strict=False):  # record_command=false: the first
        # each hidden value (at least one character) becomes three: at most 2 more per mask
        assert len(masked) <= len(original) + 2 * masked.count(MASK)


@settings(max_examples=300, deadline=None)
@given(argv=st.lists(st.text(alphabet=string.ascii_letters + string.digits + "/._,+ ", max_size=20), max_size=8))
def test_a_command_line_without_secrets_is_kept_as_it_is(argv: list[str]) -> None:
    assert mask_command([word for word in argv if not re.search(r"(?i)pass|token|secret|auth|key|cookie|pwd|cred",
                                                                word)]) == \
        [word for word in argv if not re.search(r"(?i)pass|token|secret|auth|key|cookie|pwd|cred", word)]


def test_every_client_named_has_a_rule_that_masks() -> None:
    for program, options in CLIENT_OPTIONS.items():
        for option, how in options.items():
            value = "u:s3cr3tvalue" if how == ":" else "u%s3cr3tvalue" if how == "%" else \
                "u,s3cr3tvalue" if how == "," else "s3cr3tvalue"
            argv = [program, option + value] if how == "attached" else [program, option, value]
            assert "s3cr3tvalue" not in " ".join(mask_command(argv)), (program, option)


def test_the_built_in_rules_are_the_default() -> None:
    assert mask_command(["a", "--token", "b"]) == mask_command(["a", "--token", "b"], BUILT_IN)
