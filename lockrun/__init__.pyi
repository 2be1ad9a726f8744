# The types of what lockrun/__init__.py exports lazily (mypy and other checkers read this file,
# Python the module): keep the two lists, and __all__, the same (tests/unit/test_api_surface.py).
from lockrun.api.aio import lock_async as lock_async
from lockrun.api.decorate import locked as locked
from lockrun.api.errors import Busy as Busy
from lockrun.api.errors import LeaseLost as LeaseLost
from lockrun.api.errors import LockrunError as LockrunError
from lockrun.api.errors import Paused as Paused
from lockrun.api.errors import Unavailable as Unavailable
from lockrun.api.lock import Lease as Lease
from lockrun.api.lock import lock as lock

__version__: str
__all__: list[str]
