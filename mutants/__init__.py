"""The mutant catalogue: realistic wrong implementations, each an ordinary external backend.

Every mutant is loaded the way a user's backend is (``--backend-module mutants.FAMILY:BACKENDS``)
and carries ``clauses``: the clause IDs of which at least one must fail for it. Its class
docstring says what the bug is and where such a bug comes from. One module per op family;
each exposes ``BACKENDS``. tests/test_mutants.py proves each one is caught, through the real
pytest entry point, with the clause named.
"""


def named(cls, name: str):
    """An instance of the mutant class ``cls`` called ``name`` (a mutant of the Ascend adapter
    takes its name in its constructor, as ``AscendBackend`` does)."""
    from backends.npu import AscendBackend

    backend = cls(name) if issubclass(cls, AscendBackend) else cls()
    backend.name = name
    return backend
