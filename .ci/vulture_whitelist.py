"""Names vulture cannot see used: each is called or read by name by Python or a library, never by
lockrun's own code. Read by vulture only (.ci/run: ``vulture lockrun scripts .ci/vulture_whitelist.py
--min-confidence 60``), never imported or run. Anything else vulture finds is dead: remove it."""

# Python: a module's __getattr__ and __dir__ (PEP 562), for ``lockrun.lock`` and ``dir(lockrun)``.
__getattr__  # lockrun/__init__.py
__dir__  # lockrun/__init__.py

# click: command functions, registered by @cli.command and called by click when their name is typed.
doctor  # lockrun/cli/doctor.py: lockrun doctor
show  # lockrun/cli/records.py: lockrun show
_.format_commands  # lockrun/cli/group.py: called by click as it writes `lockrun --help`

# sqlite3: a Connection's row_factory and text_factory are read by sqlite3 for every row it returns.
_.row_factory  # lockrun/ledger/store.py, lockrun/ledger/timeline.py
_.text_factory  # lockrun/ledger/timeline.py

# io: an io.RawIOBase's writable(), asked by the buffered writer and text wrapper built on it.
_.writable  # lockrun/system/own_output.py
