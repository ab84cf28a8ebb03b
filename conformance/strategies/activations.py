"""Hypothesis strategies for the activation properties (spec/activations.md).

Inputs are drawn as a ``TensorRecipe`` (shape, dtype, seed, distribution, layout).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from conformance.strategies import model_pins
from conformance.strategies.common import FLOAT_DTYPES, seeds

LAYOUTS = ("contiguous", "strided", "transposed")
# spec/activations.md, Ranges: Qwen3-MoE's and DeepSeek-V2-Lite's expert intermediate sizes.
MODEL_INTERMEDIATE = (768, 1408)

# ACT-GEGLU-MODES: |gelu_erf - gelu_tanh| is above 3e-5 on most of 1 <= |x| <= 3.5 (4.7e-4 near
# 2.7): far outside the float32 tolerance, so a swapped mode flag is visible there.
GELU_GAP = (1.0, 3.5)
# ACT-SWIGLU-STEP-ASYM: silu is below -0.19 on [-2.5, -0.8] (minimum -0.2785 at -1.278), so a
# limit under 0.19 separates the one-sided gate clamp from a symmetric one.
SILU_NEGATIVE_GATE = (-2.5, -0.8)
SILU_MINIMUM = 0.2785


@dataclass(frozen=True)
class TensorRecipe:
    """A reproducible tensor: ``make(device)`` always returns the same values."""

    shape: tuple
    dtype: torch.dtype
    seed: int
    scale: float = 1.0
    distribution: str = "normal"  # normal | gelu-gap | negative-gate
    layout: str = "contiguous"  # contiguous | strided | transposed (a view with equal values)

    def values(self) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed)
        if self.distribution == "normal":
            return torch.randn(self.shape, generator=gen, dtype=torch.float64) * self.scale
        d = self.shape[-1] // 2
        left_shape = (*self.shape[:-1], d)
        sign = torch.randint(0, 2, left_shape, generator=gen).double() * 2 - 1
        if self.distribution == "gelu-gap":
            lo, hi = GELU_GAP
            left = sign * (lo + (hi - lo) * torch.rand(left_shape, generator=gen, dtype=torch.float64))
            right = sign.flip(-1) * (0.5 + 1.5 * torch.rand(left_shape, generator=gen, dtype=torch.float64))
        elif self.distribution == "negative-gate":
            lo, hi = SILU_NEGATIVE_GATE
            left = lo + (hi - lo) * torch.rand(left_shape, generator=gen, dtype=torch.float64)
            right = sign * self.scale * torch.rand(left_shape, generator=gen, dtype=torch.float64)
        else:
            raise ValueError(
                f"distribution must be normal, gelu-gap or negative-gate, got {self.distribution!r}"
            )
        return torch.cat([left, right], dim=-1)

    def make(self, device: torch.device | str = "cpu") -> torch.Tensor:
        x = self.values().to(self.dtype).to(device)
        return as_layout(x, self.layout)


def as_layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    """A view with x's values and the requested memory layout (non-contiguous unless 'contiguous')."""
    if layout == "contiguous":
        return x
    if layout == "strided":
        buffer = torch.empty((*x.shape[:-1], 2 * x.shape[-1]), dtype=x.dtype, device=x.device)
        view = buffer[..., ::2]
    elif layout == "transposed" and x.dim() >= 2:
        buffer = torch.empty((*x.shape[:-2], x.shape[-1], x.shape[-2]), dtype=x.dtype, device=x.device)
        view = buffer.transpose(-1, -2)
    elif layout == "transposed":
        return as_layout(x, "strided")
    else:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    view.copy_(x)
    return view


@st.composite
def gated_shapes(draw, *, max_rank: int = 4, max_numel: int = 1 << 16) -> tuple:
    """Shapes [..., 2h] of rank 1..max_rank with an even last dim from 2 to 4096."""
    half = draw(st.one_of(st.integers(1, 64), st.integers(65, min(2048, max_numel // 2)),
                          st.sampled_from(MODEL_INTERMEDIATE)))  # fmt: skip
    lead = draw(st.lists(st.integers(1, 6), min_size=0, max_size=max_rank - 1))
    while lead and math.prod(lead) * 2 * half > max_numel:
        lead.pop()
    return (*lead, 2 * half)


@st.composite
def gated_inputs(
    draw,
    *,
    dtypes=FLOAT_DTYPES,
    scales=(0.5, 1.0, 3.0, 10.0),
    distribution: str = "normal",
    layouts=("contiguous",),
    max_numel: int = 1 << 16,
) -> TensorRecipe:
    return TensorRecipe(
        shape=model_pins.gated_width(draw, draw(gated_shapes(max_numel=max_numel)), max_numel),
        dtype=draw(st.sampled_from(dtypes)),
        seed=draw(seeds(bits=32)),
        scale=draw(st.sampled_from(scales)),
        distribution=distribution,
        layout=draw(st.sampled_from(layouts)),
    )


def with_limit_edges(x: torch.Tensor, limit: float | None, *, interleaved: bool = False) -> torch.Tensor:
    """x with its first row's up values set to limit - 1 ulp, limit and limit + 1 ulp in x's dtype,
    and their negatives, as many as fit (spec/activations.md, Ranges: the clamp's threshold at T - 1, T
    and T + 1); in place, so a view stays one. Unchanged without a limit."""
    if limit is None:
        return x
    t = torch.tensor(float(limit), dtype=x.dtype)
    edges = [torch.nextafter(t, torch.zeros_like(t)), t, torch.nextafter(t, torch.full_like(t, float("inf")))]
    values = torch.stack(edges + [-e for e in edges]).to(x.device)
    up = x[..., 1::2] if interleaved else x[..., x.shape[-1] // 2 :]
    row = up[(0,) * (up.dim() - 1)]  # the first row's up values: a view of x
    n = min(len(values), row.numel())
    row[:n] = values[:n]
    return x


def clamp_limits(*, low: float = 1 / 8, high: float = 20.0):
    """Limits k/8 in [low, high]: exactly representable in bf16, fp16 and fp32, so rounding the
    limit to the input dtype (which the contract allows) changes nothing."""
    return st.integers(max(1, math.ceil(low * 8)), math.floor(high * 8)).map(lambda k: k / 8)


def small_limits():
    """Limits k/64 in (0, 0.1875]: below every silu value on SILU_NEGATIVE_GATE."""
    return st.integers(1, 12).map(lambda k: k / 64)


# ACT-SWIGLU-OAI: gpt-oss's alpha and others; never 1.0, where sigmoid(alpha g) is silu's.
OAI_ALPHAS = (1.702, 0.5, 1.25, 2.0, 3.0)


def oai_limits():
    """gpt-oss's 7.0, None (no clamp), or k/8 limits."""
    return st.one_of(st.just(7.0), st.none(), clamp_limits())


@st.composite
def limit_configs(draw, *, layers: int = 8):
    """Step-3.5-shaped configs as released ones are (ACT-LIMIT-CONFIG-OFF): ``swiglu_limits`` /
    ``swiglu_limits_shared`` lists (each may be missing or None) of the layer count, or up to 3
    longer (the hub's trailing MTP entries), with values > 0 (k/8 floats or ints), zero or None;
    and a layer index. Negative values and short lists: ACT-LIMIT-CONFIG-ROBUST (SHOULD)."""

    def one_list():
        positive = st.one_of(clamp_limits(), st.integers(1, 16))
        value = st.one_of(positive, positive, st.just(0.0), st.just(0), st.none())
        full = st.lists(value, min_size=layers, max_size=layers + 3)
        return st.one_of(full, full, st.none())

    config = {}
    for key in ("swiglu_limits", "swiglu_limits_shared"):
        if draw(st.sampled_from((True, True, True, False)), label=f"{key} present"):
            config[key] = draw(one_list(), label=key)
    return config, draw(st.integers(0, layers - 1), label="layer_idx")


# ACT-SITU: Kimi-K3's beta 4.0 and linear_beta 25.0, or k/8 values (exact in float32, where the
# field computes); wide inputs (scale up to 20, |x| to about 40 and beyond) reach both soft-clips.
SITU_SCALES = (1.0, 3.0, 10.0, 20.0)


def situ_betas():
    return st.one_of(st.just(4.0), clamp_limits(low=0.5, high=8.0))


def situ_linear_betas():
    """25.0, None (no soft-clip on up), or k/8 values in [1, 40]."""
    return st.one_of(st.just(25.0), st.none(), clamp_limits(low=1.0, high=40.0))
