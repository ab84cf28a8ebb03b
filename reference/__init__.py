"""Golden oracles for the opconform contracts.

Each module implements one contract family of ``spec/`` in plain float64 PyTorch, with
strict input validation. The oracles are meant to be imported by kernel authors, e.g.::

    from reference.activations import gelu_and_mul
"""
