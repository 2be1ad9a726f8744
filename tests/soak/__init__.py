"""The seeded fault soak: ``python -m tests.soak --help``; CI runs a short one (test_soak.py)."""
