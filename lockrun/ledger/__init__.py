"""The run ledger: one SQLite file per host that records every run (docs/internals.md "The ledger").

``store``: the ``Ledger`` and its writes and reads (no liveness decisions: those are views');
``rows``: a run's row read back, each column as the type it should be; ``file``: the schema, the
migrations and opening the file safely; ``timeline``: the one query engine of ``timeline``;
``metrics``: the Prometheus exposition of what the ledger holds. May import ``system`` and ``core``.
"""
