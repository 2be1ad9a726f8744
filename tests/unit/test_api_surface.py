"""What ``lockrun`` exports for Python code (docs/python.md), and how ``lock()`` checks its arguments
before anything runs."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import lockrun
from lockrun.api.spec import block_spec
from lockrun.core import errors

PACKAGE = Path(lockrun.__file__).parent


def test_all_the_lazy_table_and_the_stub_name_the_same_things() -> None:
    stub = ast.parse((PACKAGE / "__init__.pyi").read_text())
    typed = {alias.asname for node in stub.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    exports = lockrun._EXPORTS  # type: ignore[attr-defined]  # the stub types only the public names
    assert set(lockrun.__all__) == typed == set(exports)
    for name in lockrun.__all__:
        assert getattr(lockrun, name) is not None
    assert (PACKAGE / "py.typed").is_file()
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        lockrun.nothing  # type: ignore[attr-defined]  # noqa: B018


def test_the_exceptions() -> None:
    assert lockrun.LockrunError is errors.LockrunError
    for cls, code in ((lockrun.Busy, 75), (lockrun.Unavailable, 69), (lockrun.LeaseLost, 76), (lockrun.Paused, 75)):
        assert issubclass(cls, lockrun.LockrunError) and cls.exit_code == code
    assert issubclass(lockrun.Paused, lockrun.Busy)
    lost = lockrun.LeaseLost("lease on 'x' lost: gone", name="x", reason="gone")
    assert (str(lost), lost.name, lost.reason) == ("lease on 'x' lost: gone", "x", "gone")


def test_import_lockrun_loads_nothing_of_the_api() -> None:
    loaded = subprocess.run([sys.executable, "-c", "import sys, lockrun; print(sorted(m for m in sys.modules"
                             " if m.startswith('lockrun')))"], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['lockrun']"


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"name": 3}, TypeError, "the lock name must be a str, not int"),
    ({"name": "a b"}, ValueError, "invalid lock name 'a b': use 1 to 200 characters"),
    ({"name": ""}, ValueError, "invalid lock name"),
    ({"name": "x" * 201}, ValueError, "invalid lock name"),
    ({"ttl": 0}, ValueError, "invalid ttl 0:"),
    ({"ttl": 0.5}, ValueError, "at least 1s"),
    ({"ttl": "366d"}, ValueError, "at most 365d"),
    ({"ttl": True}, TypeError, "ttl must be a number of seconds or a duration string"),
    ({"ttl": [60]}, TypeError, "not list"),
    ({"ttl": float("nan")}, ValueError, "invalid ttl"),
    ({"wait": -1}, ValueError, "invalid wait -1:"),
    ({"wait": None}, TypeError, "wait must be"),
    ({"redis_url": "http://h/"}, ValueError, "the scheme must be redis://"),
    ({"redis_url": b"redis://h"}, TypeError, "redis_url must be a str or None"),
    ({"on_lost": "ignore"}, ValueError, "on_lost must be 'raise' or 'flag'"),
])
def test_bad_arguments_are_refused_at_once(kwargs: dict[str, object], error: type[Exception], words: str) -> None:
    arguments: dict[str, object] = {"name": "job", "ttl": None, "wait": 0, "redis_url": None, "on_lost": "raise",
                                    **kwargs}
    with pytest.raises(error, match=words.replace("(", r"\(")):
        block_spec(**arguments)


def test_good_arguments() -> None:
    spec = block_spec("team/db:nightly", "2m", "1.5h", "redis://:pw@h:6379/0", "flag")
    assert (spec.name, spec.ttl, spec.wait, spec.on_lost) == ("team/db:nightly", 120.0, 5400.0, "flag")
    assert block_spec("x", 1, 0, None, "raise").ttl == 1.0
    with pytest.raises(ValueError, match="cannot parse it") as refused:
        block_spec("x", None, 0, "redis://:pw@h:99999/0", "raise")
    assert "pw" not in str(refused.value) and ":***@" in str(refused.value)  # never the password


def test_the_decorator_refuses_what_it_cannot_decorate() -> None:
    with pytest.raises(TypeError, match=r'write @lockrun.locked\("name"\)'):
        lockrun.locked(print)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"decorates a function, not int"):
        lockrun.locked("job")(42)  # type: ignore[type-var]
    with pytest.raises(ValueError, match="invalid lock name"):
        lockrun.locked("no spaces")
