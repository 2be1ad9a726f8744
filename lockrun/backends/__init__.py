"""Lock backends: the protocol (``protocol``), the values that cross it (``values``), the choice
between them (``connect``), and the two of them, ``redis/`` and ``local/``, which know nothing
of each other. A backend hands out leases whose owner token every renewal and release compares
first. May import ``system`` and ``core``; redis-py only in ``redis/``.
"""
