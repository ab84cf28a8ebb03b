"""Hypothesis strategies for the conformance properties, one module per family.

- ``activations``: gated-activation inputs (spec/activations.md);
- ``masks``: encoder and decode mask inputs, windows and padding (spec/masks.md);
- ``attention``: q/k/v recipes and decode lengths (spec/attention.md);
- ``scheduler``: scheduler configurations, trajectories and the synthetic denoiser (spec/scheduler.md);
- ``common``: the pieces every family shares (the tested float dtypes, seeds).

Tensors are drawn as *recipes* (sizes, dtype, seed, ...) and materialized with a seeded
generator: the falsifying example Hypothesis prints is then short and exact, and shrinking
touches a few integers instead of thousands of floats.
"""
