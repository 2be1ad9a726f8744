"""Docs checked by tests: generated files are current, and README, man page and --help agree."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from lockrun.cli.group import every_command
from lockrun.core.errors import EXIT_CODE_DOCS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
REFERENCE = (ROOT / "docs" / "reference.md").read_text()
MAN = ROOT / "man" / "lockrun.1"


def all_options():
    for name, command in every_command().items():
        for param in command.params:
            if isinstance(param, click.Option):
                yield name, param


def test_completions_are_current():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_completions.py"), "--check"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("words,cword,expected", [
    ("lockrun st", 1, "status"),
    ("lockrun un", 1, "unlock"),
    ("lockrun run --on-lost c", 3, "continue"),
    ("lockrun history --sta", 2, "--status"),
])
def test_bash_completion_completes_in_a_real_bash(words, cword, expected, tmp_path):
    script = (
        f"source {ROOT / 'completions' / 'lockrun.bash'}\n"
        f"COMP_WORDS=({words}); COMP_CWORD={cword}\n"
        "_lockrun_completion lockrun\n"
        "printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "LOCKRUN_STATE_DIR": str(tmp_path), "LOCKRUN_CONFIG": os.devnull}
    env.pop("LOCKRUN_REDIS_URL", None)
    result = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True, text=True,
                            env=env, timeout=60)
    assert expected in result.stdout.split(), result.stdout + result.stderr


def test_man_page_is_current():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_manpage.py"), "--check"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_reference_table_of_settings_is_current():
    """docs/reference.md "Every setting" is made from the table the code reads (config/options.py)."""
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_reference.py"), "--check"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_setting_is_one_row_made_into_its_flag_help_and_config_key():
    """Adding a run option is one row: its flag, --help line and config key all come from it."""
    from lockrun.cli.options import help_text
    from lockrun.config.options import FILE_KEYS, JOB_KEYS, OPTIONS, RUN

    run = every_command()["run"]
    by_name = {param.name: param for param in run.params}
    for option in OPTIONS:
        if option.flags and option.scope in (RUN, "global"):
            param = by_name[option.key]
            assert tuple(param.opts) == option.flags and param.help == help_text(option), option.key
        if option.key not in ("name", "config"):
            assert option.key in FILE_KEYS and (option.scope != RUN or option.key in JOB_KEYS), option.key
        assert f"`{option.key}`" in REFERENCE or option.key in ("name", "config"), option.key


def test_man_page_renders_without_warnings():
    if shutil.which("groff") is None:
        pytest.fail("groff is not installed (apt-get install groff-base); .ci/run installs it")
    result = subprocess.run(["groff", "-man", "-t", "-ww", "-z", str(MAN)], capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (0, "")


def test_man_page_has_every_section_option_and_exit_code():
    text = MAN.read_text().replace("\\-", "-")
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "ENVIRONMENT", "FILES", "EXIT STATUS",
                    "EXAMPLES", "SEE ALSO"):
        assert f".SH {section}" in text
    for command, param in all_options():
        for opt in param.opts:
            assert opt in text, f"man page lacks {command} {opt}"
    for code, _, _ in EXIT_CODE_DOCS:
        assert code in text


def test_the_reference_documents_every_command_and_option():
    for name in every_command():
        assert f"lockrun {name}" in REFERENCE, f"docs/reference.md lacks `lockrun {name}`"
    for command, param in all_options():
        if param.name == "help":
            continue
        assert any(opt in REFERENCE for opt in param.opts), f"docs/reference.md lacks {command} {param.opts}"


def test_the_readme_is_a_front_door():
    """Short, with a table of contents, the five everyday tasks and a link to every reference page."""
    assert len(README.splitlines()) <= 400
    assert "## Contents" in README
    for task in ("Wrap a crontab line", "See what holds a lock", "Clear a stuck lock", "See why a run failed",
                 "Get told on failure"):
        assert f"### {task}" in README, task
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name}" in README, f"the README does not link docs/{page.name}"
    for anchor in re.findall(r"\(docs/([a-z]+\.md)#([a-z0-9-]+)\)", README):
        headings = re.findall(r"^#+ (.+)$", (ROOT / "docs" / anchor[0]).read_text(), re.MULTILINE)
        slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
        assert anchor[1] in slugs, f"README links docs/{anchor[0]}#{anchor[1]}, which has no such heading"


def test_readme_exit_code_table_matches_the_enum_docs():
    for code, meaning, ran in EXIT_CODE_DOCS:
        assert f"| {code} | {meaning} | {ran} |" in README, f"README exit-code row for {code} differs"


def test_every_command_has_help_with_an_example():
    for name, command in every_command().items():
        assert command.help and "\b" in command.help, f"`lockrun {name} --help` lacks an example block"
        assert re.search(r"lockrun( \S+)* ", command.help)


def test_readme_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m pytest" in README and "python -m pytest" in ci


def test_the_man_pages_crontab_lines_are_the_readmes():
    # tests/test_cron.py runs every README crontab line under a real cron; the man page may not differ.
    from scripts.gen_manpage import EXAMPLES
    from tests.readme_crontab import crontab_lines, job_line

    readme = {" ".join(line.text.split()) for line in crontab_lines()}
    man_lines = [text for _, example in EXAMPLES for text in example.splitlines() if job_line(text)]
    assert len(man_lines) >= 5
    for text in man_lines:
        assert " ".join(text.split()) in readme, f"man page crontab line not in the README: {text}"


def test_crontab_lines_escape_percent_and_find_lockrun_under_crons_path():
    from tests.readme_crontab import crontab_lines, unescaped_percent

    lines = crontab_lines()
    assert len(lines) >= 10
    for line in lines:
        assert not unescaped_percent(line.command), f"README line {line.line_no}: cron turns % into a newline"
        path = [env.split("=", 1)[1] for env in line.env if env.startswith("PATH=")]
        named = line.command.startswith("/usr/local/bin/lockrun ")
        assert named or (path and "/usr/local/bin" in path[-1].split(":")), (
            f"README line {line.line_no}: cron's PATH is /usr/bin:/bin; name /usr/local/bin/lockrun or set PATH=")


LAYERS = "core|system|backends|ledger|config|run|views|render|cli|api"
LAYER_PATH = re.compile(rf"(?:lockrun/)?((?:{LAYERS})/[a-z_/]*?[a-z_]+\.py)")


def test_every_module_the_docs_name_exists():
    """README.md and docs/ name modules by their folder (docs/internals.md, "The house"): a move
    that leaves a name behind fails here."""
    named = {}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for match in LAYER_PATH.finditer(doc.read_text()):
            named.setdefault(match.group(1), doc.name)
    assert len(named) > 20, named  # the internals page names the layers' modules
    missing = {path: doc for path, doc in named.items() if not (ROOT / "lockrun" / path).is_file()}
    assert not missing, missing


def test_the_example_configs_references_name_sections_that_exist():
    """scripts/lockrun.toml.example (installed as /etc/lockrun.toml) sends its reader to sections by
    name: each must be a heading of the page it names."""
    text = (ROOT / "scripts" / "lockrun.toml.example").read_text()
    cited = re.findall(r'(README|docs/[a-z]+\.md) "([^"]+)"', text)
    assert cited, "the example config names no section"
    for page, section in cited:
        path = ROOT / ("README.md" if page == "README" else page)
        headings = {line.lstrip("#").strip().replace("`", "") for line in path.read_text().splitlines()
                    if line.startswith("#")}
        assert section in headings, f"{page} has no section {section!r}"
