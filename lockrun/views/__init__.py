"""What the read commands compute: ``status``, ``unlock`` (a verdict, never a prompt),
``history``/``show``/``prune``/``metrics`` (``records``), the ``timeline``'s lanes, and the
fleet record read back defensively (``fleet``, ``sources``). Nothing here prints or imports
click or rich; never imports ``run``.
"""
