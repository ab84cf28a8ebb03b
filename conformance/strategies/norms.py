"""Hypothesis strategies for the norm properties (spec/norms.md).

Inputs are drawn as a ``NormRecipe`` (shape, dtype, seed, scale, eps); ``make(device)`` gives
``x``, ``residual`` and ``weight`` with the same values every time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from conformance.strategies.common import FLOAT_DTYPES, seeds

# The eps values of the field's configs (spec/norms.md).
EPS_VALUES = (1e-6, 1e-5)
# NORM-DTYPE: float16 squares overflow above |x| of about 256 and reach the subnormal range
# below about 8e-3 (sqrt of the smallest normal, 6.1e-5); rows at these scales break a float16
# computation.
FLOAT16_EXTREME_SCALES = (1e-3, 400.0, 2000.0)


@dataclass(frozen=True)
class NormRecipe:
    """x, residual of ``shape`` and weight of ``shape[-1]``, normal values times ``scale`` (the
    weight times ``weight_scale``), in ``dtype``; ``eps`` is the op's keyword."""

    shape: tuple
    dtype: torch.dtype
    seed: int
    eps: float
    scale: float = 1.0
    weight_scale: float = 1.0

    def make(self, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed)
        x = torch.randn(self.shape, generator=gen, dtype=torch.float64) * self.scale
        residual = torch.randn(self.shape, generator=gen, dtype=torch.float64) * self.scale
        weight = torch.randn(self.shape[-1], generator=gen, dtype=torch.float64) * self.weight_scale
        return tuple(t.to(self.dtype).to(device) for t in (x, residual, weight))


@st.composite
def norm_shapes(draw, *, max_rank: int = 3, max_numel: int = 1 << 15) -> tuple:
    """Shapes [..., d] of rank 1..max_rank with d from 1 to 4096."""
    d = draw(st.one_of(st.integers(1, 64), st.integers(65, 4096)))
    lead = draw(st.lists(st.integers(1, 6), min_size=0, max_size=max_rank - 1))
    while lead and math.prod(lead) * d > max_numel:
        lead.pop()
    return (*lead, d)


@st.composite
def norm_inputs(
    draw,
    *,
    dtypes=FLOAT_DTYPES,
    scales=(0.1, 1.0, 10.0),
    eps_values=EPS_VALUES,
    weight_scales=(0.5, 1.0, 3.0),
    max_numel: int = 1 << 15,
) -> NormRecipe:
    return NormRecipe(
        shape=draw(norm_shapes(max_numel=max_numel)),
        dtype=draw(st.sampled_from(dtypes)),
        seed=draw(seeds(bits=32)),
        eps=draw(st.sampled_from(eps_values)),
        scale=draw(st.sampled_from(scales)),
        weight_scale=draw(st.sampled_from(weight_scales)),
    )


@st.composite
def eps_scale_inputs(draw) -> NormRecipe:
    """NORM-EPS: float32 rows of magnitude about sqrt(eps), where the mean square is comparable
    to eps and eps outside the root is off by tens of percent."""
    eps = draw(st.sampled_from(EPS_VALUES))
    factor = draw(st.sampled_from((0.5, 1.0, 2.0)))
    recipe = draw(norm_inputs(dtypes=(torch.float32,), eps_values=(eps,), scales=(1.0,)))
    return NormRecipe(
        recipe.shape, recipe.dtype, recipe.seed, eps, math.sqrt(eps) * factor, recipe.weight_scale
    )
