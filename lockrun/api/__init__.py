"""The same locks from Python code (docs/python.md): ``with lockrun.lock("name") as lease:``.

A block is a run: the same lease (``run/lease_client``, renewed by ``run/keeper``), the same
ledger row (``run/journal``) and fleet record as ``lockrun run`` gives a command, so ``status``,
``history`` and ``unlock`` see both alike. What is the API's own:

    lock       lockrun.lock(), the context manager it returns, the Lease
    block      one block's run: entry, watcher, exit
    delivery   how a lost lease reaches the code (a signal to the main thread, an asynchronous
               exception to another)
    holds      the names this process's blocks hold (POSIX locks belong to the process)
    ending     a block's end as a run's outcome (pure)
    spec       lock()'s arguments, checked
    settings   what a block resolves (one function)
    errors     Busy, Paused, Unavailable, LeaseLost
    decorate   @lockrun.locked
    aio        lockrun.lock_async (asyncio)

The package ``lockrun`` exports the public names lazily, so that neither ``import lockrun`` nor
the ``lockrun`` command pays for this package. Imports ``run``, ``config``, ``ledger``, the
``backends`` protocol, ``system`` and ``core``; never click, rich, ``cli``, ``render`` or ``views``
(import-linter checks it).
"""
