"""Benchmark cases for ``opconform bench`` (``python -m opconform.cli bench``).

``benchmarks.cases`` lists every case: an op, a shape set taken from the field models (SANA,
Step-3.5-Flash), how to build its inputs and, for some oracle cases, a speed/memory target.
``benchmarks.peers`` holds the bench-only peer implementations (e.g. SDPA with a float mask).
"""
