"""``@lockrun.locked("name")``: every call of a function is a block under the lock (docs/python.md)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from lockrun.api.block import site_of
from lockrun.api.lock import LockBlock
from lockrun.api.spec import OnLost, block_spec

F = TypeVar("F", bound=Callable[..., Any])

#: The flag of a code object made by ``async def`` (inspect.CO_COROUTINE; inspect itself is slow to import).
CO_COROUTINE = 0x80


def locked(
    name: str, *, ttl: float | str | None = None, wait: float | str = 0, redis_url: str | None = None,
    on_lost: OnLost = "raise",
) -> Callable[[F], F]:
    """``@lockrun.locked("report")``: every call of the function is a block under the lock (an ``async
    def`` one under :func:`lockrun.lock_async`). Its record names the function."""
    if callable(name):  # @lockrun.locked without its parentheses
        raise TypeError('@lockrun.locked takes the lock name: write @lockrun.locked("name")')
    spec = block_spec(name, ttl, wait, redis_url, on_lost)

    def decorate(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"@lockrun.locked({name!r}) decorates a function, not {type(fn).__name__}")
        site = site_of(getattr(fn, "__module__", None), getattr(fn, "__qualname__", None))
        code = getattr(fn, "__code__", None)
        if code is not None and code.co_flags & CO_COROUTINE:
            from lockrun.api.aio import AsyncLockBlock  # asyncio only for an async def

            @functools.wraps(fn)
            async def in_async_block(*args: Any, **kwargs: Any) -> Any:
                async with AsyncLockBlock(spec, site):
                    return await fn(*args, **kwargs)

            return in_async_block  # type: ignore[return-value]

        @functools.wraps(fn)
        def in_block(*args: Any, **kwargs: Any) -> Any:
            with LockBlock(spec, site):
                return fn(*args, **kwargs)

        return in_block  # type: ignore[return-value]

    return decorate
