"""The bottom layer: what every other layer shares, and imports nothing of lockrun's.

Exit codes and the exceptions that carry them (``errors``), every default and limit
(``defaults``), the ``Status`` vocabulary and the shape of a run's row (``record``), time
(``clock``, ``zones``) and printable text (``printable``, ``os_text``). Only the standard library
below it.
"""
