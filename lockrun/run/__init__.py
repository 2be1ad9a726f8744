"""One ``lockrun run``, start to finish (docs/internals.md "One run, step by step").

``command`` turns the run command's flags into a ``Run`` (``runner``), which sequences the
ledger row (``journal``), the lease (``lease_client``, renewed by ``keeper``, watched by
``watch``, bounded by the kernel ``backstop``), the command (``supervisor`` with ``signals``,
``watchdog``, ``capture``, and ``strays``, ``descendants`` and ``cgroup`` for what it leaves
behind), how it ended (``outcome``) and what is said afterwards (``notify``). Never imports
``views``.
"""
