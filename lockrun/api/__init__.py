"""The same locks from Python code (docs/python.md): ``with lockrun.lock("name") as lease:``.

A block is a run: the same lease (``run/lease_client``, renewed by ``run/keeper``), the same
ledger row (``run/journal``) and fleet record as ``lockrun run`` gives a command, so ``status``,
``history`` and ``unlock`` see both alike. What is the API's own: the block's life (``block``),
how a lost lease reaches the code inside it (``delivery``: a signal to the main thread, an
asynchronous exception to another), how a block's end becomes a ledger status (``ending``), the
settings a block resolves (``settings``, one function), the exceptions (``errors``),
``@lockrun.locked`` (``decorate``) and ``asyncio`` (``aio``). The package ``lockrun`` exports the public names lazily, so that neither
``import lockrun`` nor the ``lockrun`` command pays for this package.

Imports ``run``, ``config``, ``ledger``, the ``backends`` protocol, ``system`` and ``core``;
never click, rich, ``cli``, ``render`` or ``views`` (import-linter checks it).
"""
