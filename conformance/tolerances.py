"""The tolerance table: |actual - expected| <= atol + rtol * |expected|, per family and dtype.

``expected`` is the float64 oracle evaluated on the very values the backend received (inputs
are drawn in the tested dtype, then upcast), so the table only has to absorb the backend's own
rounding. Every entry is justified in spec/tolerances.md (clause TOL-TABLE); a self-test checks
that the spec's table and this one agree. Never widen an entry to make a test pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


# Start: torch.testing.assert_close defaults. Activations round at most twice (the activation,
# then the product), which these defaults absorb: 2 unit roundoffs is 9.8e-4 in float16.
ASSERT_CLOSE_DEFAULTS = {
    torch.float64: Tolerance(rtol=1e-7, atol=1e-7),
    torch.float32: Tolerance(rtol=1.3e-6, atol=1e-5),
    torch.float16: Tolerance(rtol=1e-3, atol=1e-5),
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=1e-5),
}

TOLERANCES: dict[str, dict[torch.dtype, Tolerance]] = {
    "activations": dict(ASSERT_CLOSE_DEFAULTS),
    # ATTN-TOL: atol is scaled by max(1, max |v|); about 4 unit roundoffs in fp16/bf16, and 5x
    # the largest float32 error measured over native, flex and npu-emulated (spec/tolerances.md).
    "attention": {
        torch.float64: Tolerance(rtol=1e-7, atol=1e-7),
        torch.float32: Tolerance(rtol=1e-5, atol=2e-5),
        torch.float16: Tolerance(rtol=2e-3, atol=2e-3),
        torch.bfloat16: Tolerance(rtol=1.6e-2, atol=1.6e-2),
    },
}


def tolerance(family: str, dtype: torch.dtype) -> Tolerance:
    try:
        table = TOLERANCES[family]
    except KeyError:
        raise ValueError(f"family must be one of {sorted(TOLERANCES)}, got {family!r}") from None
    try:
        return table[dtype]
    except KeyError:
        raise ValueError(f"no {family} tolerance for dtype {dtype}; known: {list(table)}") from None


# The scheduler family (spec/scheduler.md, DPM-TOL). A step rounds its output once to the model
# dtype; float32 rows also absorb diffusers' float32 schedule (sigma_min has relative error up to
# 1.5e-4 from 1 - abar_0 = beta_start formed in float32). On top of the table, the absolute term
# grows by DPM_CONVERSION_ROUNDINGS * eps/2 * sum_j |c_j| g_j: the data prediction may be formed in
# the model dtype (diffusers does), and g_j bounds the magnitudes rounded there.
DPM_CONVERSION_ROUNDINGS = 4
TOLERANCES["scheduler"] = {
    torch.float32: Tolerance(rtol=1e-4, atol=1e-4),
    torch.float16: Tolerance(rtol=2e-3, atol=1e-3),
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=8e-3),
}
# set_timesteps' sigmas, compared with the float64 oracle's (diffusers stores them in float32).
TOLERANCES["scheduler-sigmas"] = {
    torch.float32: Tolerance(rtol=2e-4, atol=1e-7),
    torch.float64: Tolerance(rtol=1e-7, atol=1e-12),
}
