"""The lock backend protocol and the values that cross it.

A backend hands out leases: ``acquire`` returns a :class:`Lease`, the
:class:`Holder` that has the lock, or :class:`Duplicate` when a ``--once`` key
is already done. ``renew`` and ``release`` compare the owner token first, so a
lease that was lost (expired, stolen, cleared) is never extended or deleted by
its former owner.
"""
