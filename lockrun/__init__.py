"""lockrun: run a command under a named, renewed lease so it never runs twice at once.

The same locks from Python code (docs/python.md)::

    import lockrun
    with lockrun.lock("report", ttl="2m", wait="30s") as lease:
        ...  # lease.token is the fencing token; LeaseLost is raised here if the lease is lost

The names below are imported when first used (PEP 562), so that ``import lockrun``, which the
``lockrun`` command does first, costs nothing for them; ``__init__.pyi`` types them.
"""

__version__ = "0.1.0"
#: The date of this version (the man page's .TH date); changed with __version__.
__date__ = "2026-12-06"

__all__ = ["Busy", "Lease", "LeaseLost", "LockrunError", "Paused", "Unavailable", "lock", "lock_async", "locked"]

#: Each public name and the module it lives in.
_EXPORTS = {
    "Busy": "lockrun.api.errors",
    "Lease": "lockrun.api.lock",
    "LeaseLost": "lockrun.api.errors",
    "LockrunError": "lockrun.api.errors",
    "Paused": "lockrun.api.errors",
    "Unavailable": "lockrun.api.errors",
    "lock": "lockrun.api.lock",
    "lock_async": "lockrun.api.aio",
    "locked": "lockrun.api.decorate",
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lockrun' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # from now on found without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
