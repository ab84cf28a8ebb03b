"""Hypothesis strategies for the norm properties (spec/norms.md).

Inputs are drawn as a ``NormRecipe`` (shape, dtypes, seed, scale, eps, layout); ``make(device)``
gives ``x``, ``residual`` and ``weight`` with the same values every time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from conformance.strategies.common import FLOAT_DTYPES, pinned, seeds

# The eps values of the field's configs (spec/norms.md).
EPS_VALUES = (1e-6, 1e-5)
# spec/norms.md, Ranges: gpt-oss's and DeepSeek-V3's hidden sizes (not powers of two, past 1024).
MODEL_HIDDEN = (2880, 7168)
# NORM-DTYPE: float16 squares overflow above |x| of about 256 and reach the subnormal range
# below about 8e-3 (sqrt of the smallest normal, 6.1e-5); rows at these scales break a float16
# computation.
FLOAT16_EXTREME_SCALES = (1e-3, 400.0, 2000.0)
# NORM-LAYOUT: the views frameworks hand a norm kernel. "row-strided": each row a slice of a wider
# row (x as the hidden part of a fused projection's output: rows d + 3 apart, offset 1);
# "strided": every other element of a buffer; "transposed": the last two dims swapped in memory.
# The weight is a strided view whenever x is not contiguous. The memory around a view is NaN, so
# a kernel that reads outside it returns NaN.
LAYOUTS = ("contiguous", "row-strided", "strided", "transposed")
# NORM-MIXED: the field's mixed cases, low-precision activations with a float32 weight and/or a
# float32 residual stream (and a float32 x with a bfloat16 weight or residual).
MIXED_DTYPES = (
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.float32),
    (torch.float32, torch.bfloat16),
)


@dataclass(frozen=True)
class NormRecipe:
    """x, residual of ``shape`` and weight of ``shape[-1]``, normal values times ``scale`` (the
    weight times ``weight_scale``), x in ``dtype``, weight and residual in ``weight_dtype`` and
    ``residual_dtype`` (None: ``dtype``), laid out as ``layout``; ``eps`` is the op's keyword."""

    shape: tuple
    dtype: torch.dtype
    seed: int
    eps: float
    scale: float = 1.0
    weight_scale: float = 1.0
    weight_dtype: torch.dtype | None = None
    residual_dtype: torch.dtype | None = None
    layout: str = "contiguous"

    @property
    def dtypes(self) -> tuple[torch.dtype, torch.dtype, torch.dtype]:
        """The dtypes of x, residual and weight."""
        return self.dtype, self.residual_dtype or self.dtype, self.weight_dtype or self.dtype

    def make(self, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        gen = torch.Generator().manual_seed(self.seed)
        x = torch.randn(self.shape, generator=gen, dtype=torch.float64) * self.scale
        residual = torch.randn(self.shape, generator=gen, dtype=torch.float64) * self.scale
        weight = torch.randn(self.shape[-1], generator=gen, dtype=torch.float64) * self.weight_scale
        x, residual, weight = (
            t.to(dtype).to(device) for t, dtype in zip((x, residual, weight), self.dtypes, strict=True)
        )
        if self.layout == "contiguous":
            return x, residual, weight
        return as_view(x, self.layout), as_view(residual, self.layout), as_view(weight, "strided")

    def describe(self) -> str:
        """The dtypes and layout, for a failure's context."""
        names = ", ".join(
            f"{n} {str(d).removeprefix('torch.')}"
            for n, d in zip(("x", "residual", "weight"), self.dtypes, strict=True)
        )
        return f"{names}, {self.layout}, x scale {self.scale:g}"


def as_view(t: torch.Tensor, layout: str) -> torch.Tensor:
    """NORM-LAYOUT: a view with t's values and ``layout`` (LAYOUTS) in a NaN-filled buffer."""
    if layout == "transposed" and t.dim() < 2:
        layout = "strided"
    if layout == "row-strided" and t.dim() < 2:
        layout = "strided"  # one row is contiguous whatever its buffer
    if layout == "row-strided":
        buffer = t.new_full((*t.shape[:-1], t.shape[-1] + 3), float("nan"))
        view = buffer[..., 1 : 1 + t.shape[-1]]
    elif layout == "strided":
        buffer = t.new_full((*t.shape[:-1], 2 * t.shape[-1]), float("nan"))
        view = buffer[..., ::2]
    elif layout == "transposed":
        buffer = t.new_full((*t.shape[:-2], t.shape[-1], t.shape[-2]), float("nan"))
        view = buffer.transpose(-1, -2)
    else:
        raise ValueError(f"layout must be one of {LAYOUTS[1:]}, got {layout!r}")
    view.copy_(t)
    return view


@st.composite
def norm_shapes(draw, *, max_rank: int = 3, max_numel: int = 1 << 15) -> tuple:
    """Shapes [..., d] of rank 1..max_rank with d from 1 to 4096, or one row of a model's (MODEL_HIDDEN)."""
    d = draw(st.one_of(st.integers(1, 64), st.integers(65, 4096), st.sampled_from(MODEL_HIDDEN)))
    lead = [] if d in MODEL_HIDDEN else draw(st.lists(st.integers(1, 6), min_size=0, max_size=max_rank - 1))
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
    layouts=("contiguous",),
) -> NormRecipe:
    return NormRecipe(
        shape=draw(norm_shapes(max_numel=max_numel)),
        dtype=draw(st.sampled_from(dtypes)),
        seed=draw(seeds(bits=32)),
        eps=draw(pinned("norm.eps", st.sampled_from(eps_values))),  # MODEL-RUN: the model's eps
        scale=draw(st.sampled_from(scales)),
        weight_scale=draw(st.sampled_from(weight_scales)),
        layout=draw(st.sampled_from(layouts)),
    )


@st.composite
def mixed_inputs(draw, *, max_numel: int = 1 << 12) -> NormRecipe:
    """NORM-MIXED: x in one dtype, weight and residual each in x's or the other of a MIXED_DTYPES
    pair, never all three equal."""
    low, other = draw(st.sampled_from(MIXED_DTYPES))
    weight_dtype, residual_dtype = draw(st.sampled_from(((other, low), (low, other), (other, other))))
    recipe = draw(norm_inputs(dtypes=(low,), max_numel=max_numel))
    return NormRecipe(
        recipe.shape, low, recipe.seed, recipe.eps, recipe.scale, recipe.weight_scale,
        weight_dtype=weight_dtype, residual_dtype=residual_dtype,
    )  # fmt: skip


@st.composite
def eps_scale_inputs(draw) -> NormRecipe:
    """NORM-EPS: float32 rows of magnitude about sqrt(eps), where the mean square is comparable
    to eps and eps outside the root is off by tens of percent."""
    eps = draw(pinned("norm.eps", st.sampled_from(EPS_VALUES)))
    factor = draw(st.sampled_from((0.5, 1.0, 2.0)))
    recipe = draw(norm_inputs(dtypes=(torch.float32,), eps_values=(eps,), scales=(1.0,)))
    return NormRecipe(
        recipe.shape, recipe.dtype, recipe.seed, eps, math.sqrt(eps) * factor, recipe.weight_scale
    )
