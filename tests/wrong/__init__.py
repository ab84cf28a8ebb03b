"""Wrong implementations, written as external backends exactly as a user would write theirs.

Each module exposes ``BACKENDS`` (an iterable) and ``EXPECTED``: backend name -> the clauses
of which at least one must fail for that backend. tests/test_wrong_*.py load them with
``--backend-module`` through the real pytest entry point and check the clause is named.
"""
