"""Hypothesis strategies for the quant properties (spec/quant.md).

Each draw is a small frozen recipe (sizes, dtypes, seed, the feature it exercises); ``make(device)``
builds the op's arguments with the same values every time. Sizes follow spec/quant.md, Ranges:
K past 256 threads and at 7168, odd K, M past 128, block GEMM N and K at 128 t - 1, 128 t, 128 t + 1.
Large sizes are drawn cheap (one row, one column). In a profile run each recipe is put at one of the
model's quantized linear layers (``quant_pins``, spec/models.md MODEL-QUANT).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from conformance.strategies import quant_pins as model
from conformance.strategies.common import seeds
from conformance.strategies.quant_pins import at_model
from reference.quant import FP8_DTYPES, GROUP_SIZES, OUT_DTYPES

ACT_DTYPES = (torch.bfloat16, torch.float16)  # the activations the field quantizes
# (rows, K): odd K, K past vLLM's 256 threads a row, DeepSeek-V3's 7168 (one row), M past 128.
INT8_SHAPES = ((1, 7), (3, 33), (2, 257), (5, 300), (1, 7168), (131, 5))
# (M, K, N) of the W8A8 GEMM: K odd, past 256 and at 7168 (cheap: one row, one column).
MM_SHAPES = ((1, 5, 3), (4, 33, 7), (3, 257, 9), (129, 40, 3), (1, 7168, 2), (2, 2880, 1))
# Block GEMM N and K around the 128 block (QUANT-FP8-BLOCK-PARTIAL), M past a 128-token tile.
BLOCK_SIDES = (127, 128, 129, 255, 257)
BLOCK_M = (1, 3, 130)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@dataclass(frozen=True)
class Int8QuantRecipe:
    """x [rows, K] in ``dtype``; ``feature``: "plain", "zero-row" (row 0 all zeros) or "ties" (every
    row's amax is 127 * 2^e and its other values multiples of 2^(e-1): exact quotients, many ties)."""

    shape: tuple
    dtype: torch.dtype
    seed: int
    feature: str = "plain"

    def make(self, device="cpu") -> torch.Tensor:
        gen = _generator(self.seed)
        rows, k = self.shape
        if self.feature == "ties":
            e = torch.randint(-3, 4, (rows, 1), generator=gen).double()
            halves = torch.randint(-254, 255, (rows, k), generator=gen).double() / 2
            halves[:, 0] = 127
            x = halves * torch.exp2(e)
        else:
            x = torch.randn(rows, k, generator=gen, dtype=torch.float64) * 3
            if self.feature == "zero-row":
                x[0] = 0
        return x.to(self.dtype).to(device)


def int8_quant_inputs(features=("plain", "zero-row")):
    drawn = st.builds(Int8QuantRecipe, st.sampled_from(INT8_SHAPES), st.sampled_from(ACT_DTYPES), seeds(),
                      st.sampled_from(features))  # fmt: skip
    return at_model(drawn, model.int8_quant)


@dataclass(frozen=True)
class Int8MmRecipe:
    """a [M, K], b [K, N] int8; scales float32 per token / channel (or per tensor), in one of the field's
    shapes; a bias in out_dtype or None. ``cancel``: rows of +-127 whose sums cancel to small values."""

    shape: tuple
    out_dtype: torch.dtype
    seed: int
    per_tensor_a: bool = False
    per_tensor_b: bool = False
    bias: bool = False
    cancel: bool = False
    b_scale_layout: str = "row"  # [1, N], "column" [N, 1], "flat" [N]
    b_transposed: bool = False

    def make(self, device="cpu"):
        gen = _generator(self.seed)
        m, k, n = self.shape
        if self.cancel:  # partial sums up to 127^2 K / 2 (past 2^24 at K = 7168), the total small
            a = torch.full((m, k), 127, dtype=torch.int8)
            b = torch.full((k, n), 127, dtype=torch.int8)
            b[k // 2 :] = -127
            b[-1] = torch.randint(-9, 10, (n,), generator=gen).to(torch.int8)
        else:
            a = torch.randint(-127, 128, (m, k), generator=gen, dtype=torch.int8)
            b = torch.randint(-127, 128, (k, n), generator=gen, dtype=torch.int8)
        if self.b_transposed:  # QUANT-W8A8-MM: the [N, K] weight's transposed view, as vLLM passes it
            b = b.T.contiguous().T
        scale_a = torch.rand(1 if self.per_tensor_a else m, 1, generator=gen) * 0.02 + 1e-3
        scale_b = torch.rand(1 if self.per_tensor_b else n, generator=gen) * 0.02 + 1e-3
        if not self.per_tensor_b:
            scale_b = {"row": scale_b[None, :], "column": scale_b[:, None], "flat": scale_b}[
                self.b_scale_layout
            ]
        bias = torch.randn(n, generator=gen).to(self.out_dtype) if self.bias else None
        return tuple(None if t is None else t.to(device) for t in (a, b, scale_a, scale_b, bias))


def int8_mm_inputs(*, per_tensor=None, bias=None, cancel=None):
    """Unset options are drawn (cancel: False)."""
    per_tensor = st.booleans() if per_tensor is None else per_tensor
    bias = st.booleans() if bias is None else bias
    cancel = st.just(False) if cancel is None else cancel
    layouts = st.sampled_from(("row", "column", "flat"))
    shapes, dtypes = st.sampled_from(MM_SHAPES), st.sampled_from(OUT_DTYPES)
    drawn = st.builds(Int8MmRecipe, shapes, dtypes, seeds(), per_tensor, per_tensor, bias, cancel, layouts,
                      st.booleans())  # fmt: skip
    return at_model(drawn, model.int8_mm)


@dataclass(frozen=True)
class Fp8QuantRecipe:
    """x [rows, K] in ``dtype``; ``static`` None (dynamic) or the fraction of amax / F the given scale
    is (below 1: values beyond F * scale, which must saturate)."""

    shape: tuple
    dtype: torch.dtype
    fp8_dtype: torch.dtype
    seed: int
    static: float | None = None

    def make(self, device="cpu"):
        x = (torch.randn(self.shape, generator=_generator(self.seed), dtype=torch.float64) * 3).to(self.dtype)
        scale = None
        if self.static is not None:
            top = torch.finfo(self.fp8_dtype).max
            scale = (x.double().abs().amax() / top * self.static).float().reshape(1).to(device)
        return x.to(device), scale


def fp8_quant_inputs(static=None):
    static = st.none() if static is None else static
    return st.builds(Fp8QuantRecipe, st.sampled_from(INT8_SHAPES[:4]), st.sampled_from(ACT_DTYPES),
                     st.sampled_from(FP8_DTYPES), seeds(), static)  # fmt: skip


@dataclass(frozen=True)
class GroupRecipe:
    """x [rows, groups * group_size] with per-group magnitudes 2^[-8, 8] (so a wrong group's scale
    shows); ``zero_group``: group 0 of row 0 all zeros."""

    rows: int
    groups: int
    group_size: int
    dtype: torch.dtype
    fp8_dtype: torch.dtype
    use_ue8m0: bool
    seed: int
    zero_group: bool = False

    def make(self, device="cpu") -> torch.Tensor:
        gen = _generator(self.seed)
        x = torch.randn(self.rows, self.groups, self.group_size, generator=gen, dtype=torch.float64)
        x = x * torch.exp2(torch.randint(-8, 9, (self.rows, self.groups, 1), generator=gen).double())
        if self.zero_group:
            x[0, 0] = 0
        return x.flatten(1).to(self.dtype).to(device)


def group_inputs(use_ue8m0=None, zero_group=None):
    use_ue8m0 = st.booleans() if use_ue8m0 is None else use_ue8m0
    zero_group = st.booleans() if zero_group is None else zero_group
    drawn = st.builds(GroupRecipe, st.sampled_from((1, 3, 130)), st.sampled_from((1, 2, 5)),
                      st.sampled_from(GROUP_SIZES), st.sampled_from(ACT_DTYPES), st.sampled_from(FP8_DTYPES),
                      use_ue8m0, seeds(), zero_group)  # fmt: skip
    return at_model(drawn, model.group)


@dataclass(frozen=True)
class BlockMmRecipe:
    """a [M, K], b [N, K] fp8 with scales distinct per group / block (powers of two in [2^-6, 2^2], so a
    misplaced scale is off by a factor of at least 2), block (bn, bk)."""

    m: int
    n: int
    k: int
    fp8_dtype: torch.dtype
    out_dtype: torch.dtype
    seed: int
    block_size: tuple = (128, 128)

    def make(self, device="cpu"):
        gen = _generator(self.seed)
        bn, bk = self.block_size
        kb = math.ceil(self.k / bk)
        a = torch.randn(self.m, self.k, generator=gen).to(self.fp8_dtype)
        b = torch.randn(self.n, self.k, generator=gen).to(self.fp8_dtype)
        a_s = torch.exp2(torch.randint(-6, 3, (self.m, kb), generator=gen).float())
        b_s = torch.exp2(torch.randint(-6, 3, (math.ceil(self.n / bn), kb), generator=gen).float())
        return tuple(t.to(device) for t in (a, b, a_s, b_s))


def block_mm_inputs(sides=BLOCK_SIDES):
    n, k = st.sampled_from(sides), st.sampled_from(sides)
    dtypes = st.sampled_from(FP8_DTYPES), st.sampled_from(OUT_DTYPES)
    drawn = st.builds(BlockMmRecipe, st.sampled_from(BLOCK_M), n, k, *dtypes, seeds())
    return at_model(drawn, model.block_mm)


@dataclass(frozen=True)
class FnuzRecipe:
    """An e4m3fn weight [N, K] of random finite bit patterns (0x80 among them), float32 scales."""

    shape: tuple
    seed: int
    input_scale: bool

    def make(self, device="cpu"):
        gen = _generator(self.seed)
        bits = torch.randint(0, 256, self.shape, generator=gen).to(torch.uint8)
        bits[bits.view(torch.float8_e4m3fn).float().isnan()] = 0x80  # no NaN; more -0 patterns
        weight = bits.view(torch.float8_e4m3fn)
        scale = torch.rand(self.shape[0], 1, generator=gen) + 0.01
        input_scale = torch.rand(1, generator=gen) + 0.01 if self.input_scale else None
        return weight.to(device), scale.to(device), None if input_scale is None else input_scale.to(device)


def fnuz_inputs():
    return st.builds(FnuzRecipe, st.sampled_from(((3, 16), (129, 7), (2, 300))), seeds(), st.booleans())


# QUANT-W4A16-PACKING: the column of an AWQ word's nibble i (written from the text, not the oracle).
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
W4_SHAPES = ((3, 128, 16), (1, 384, 8), (130, 256, 24))  # (M, K, N): K a multiple of 128, M past 128


def pack_int4(values: torch.Tensor, *, dim: int, awq: bool) -> torch.Tensor:
    """Values 0..15 [R, C] -> int32 words, 8 per word along ``dim`` (1: columns, 0: rows); AWQ puts
    column AWQ_PACK_ORDER[i] of a group in nibble i, GPTQ element i in nibble i."""
    v = values.to(torch.int64)
    v = v.unflatten(1, (-1, 8)) if dim == 1 else v.unflatten(0, (-1, 8)).transpose(1, 2)  # [.., .., 8]
    order = AWQ_PACK_ORDER if awq else range(8)
    words = sum(v[..., column] << (4 * i) for i, column in enumerate(order))
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


@dataclass(frozen=True)
class W4Recipe:
    """x [M, K] and an int4 weight [K, N] in groups of ``group_size`` (a scale magnitude 2^[-9, -5] and
    zeros per group), packed as ``packing``; ``make`` returns (x, qweight, scales, qzeros)."""

    shape: tuple
    group_size: int
    packing: str
    dtype: torch.dtype
    seed: int

    def make(self, device="cpu"):
        gen = _generator(self.seed)
        m, k, n = self.shape
        groups = k // self.group_size
        q = torch.randint(0, 16, (k, n), generator=gen)
        low = 1 if self.packing == "gptq" else 0  # QUANT-W4A16-ZEROS: v1 cannot store zero 0
        zeros = torch.randint(low, 16, (groups, n), generator=gen)
        magnitude = torch.exp2(torch.randint(-9, -4, (groups, 1), generator=gen).float())
        scales = ((torch.rand(groups, n, generator=gen) + 0.5) * magnitude).to(self.dtype)
        x = torch.randn(m, k, generator=gen).to(self.dtype)
        awq = self.packing == "awq"
        qweight = pack_int4(q, dim=1 if awq else 0, awq=awq)
        qzeros = pack_int4(zeros - (1 if self.packing == "gptq" else 0), dim=1, awq=awq)
        return tuple(t.to(device) for t in (x, qweight, scales, qzeros))


def w4a16_inputs(packings=("awq", "gptq", "gptq_v2")):
    shapes, groups, packing = (
        st.sampled_from(W4_SHAPES),
        st.sampled_from(GROUP_SIZES),
        st.sampled_from(packings),
    )
    drawn = st.builds(W4Recipe, shapes, groups, packing, st.sampled_from(ACT_DTYPES), seeds())
    return at_model(drawn, model.w4a16)
