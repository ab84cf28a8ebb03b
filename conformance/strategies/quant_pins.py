"""The quant recipes at a model profile's pins (spec/models.md, MODEL-QUANT; MODEL-RUN).

Each adapter takes a drawn recipe of ``conformance.strategies.quant`` and, in a profile run, puts
it at one of the model's quantized linear layers: K exactly (the accumulation length, the groups
and blocks along it), a few rows, and N cut to a few columns (int8: a column's sum does not depend
on the others) or to whole blocks plus the model's partial one (fp8 blocks: N mod bn kept), with
the model's fp8 format, block size, scale format, int8 scale granularity and int4 groups.
Unpinned, an adapter draws nothing and returns the recipe as drawn (the generic examples are
unchanged). Pins are read when an example is drawn (``conformance.strategies.common.pinned_values``).
"""

from __future__ import annotations

import dataclasses
import math

from hypothesis import strategies as st

from conformance.strategies.common import pinned_values

ROWS = (1, 3)  # tokens a model-shaped case quantizes: one, and several
INT8_COLUMNS = 4  # N of an int8 GEMM at a model's shape: its K exact, a few output channels
W4_COLUMNS = 16  # N of a w4a16 GEMM: two packed words' worth of columns


def block_columns(n: int, bn: int) -> int:
    """N of a block GEMM at a model's N: itself up to three blocks, else two whole blocks and the
    model's partial trailing block (N mod bn), so every block-edge case of the model is kept."""
    return n if n <= 3 * bn else 2 * bn + n % bn


def _linear(draw):
    """(rows, K, N) of one of the model's quantized linear layers, or None unpinned."""
    shapes = pinned_values("quant.linear")
    if not shapes:
        return None
    k, n = draw(st.sampled_from(shapes))
    return draw(st.sampled_from(ROWS)), k, n


def int8_quant(draw, recipe):
    linear = _linear(draw)
    return recipe if linear is None else dataclasses.replace(recipe, shape=linear[:2])


def int8_mm(draw, recipe):
    linear = _linear(draw)
    if linear is None:
        return recipe
    m, k, n = linear
    granularity = pinned_values("quant.int8_scales") or ((False, False),)
    per_tensor_a, per_tensor_b = draw(st.sampled_from(granularity))
    return dataclasses.replace(recipe, shape=(m, k, min(n, INT8_COLUMNS)), per_tensor_a=per_tensor_a,
                               per_tensor_b=per_tensor_b)  # fmt: skip


def _fp8(draw):
    formats = pinned_values("quant.fp8")
    linear = _linear(draw) if formats else None
    return None if linear is None else (*draw(st.sampled_from(formats)), *linear)


def group(draw, recipe):
    at = _fp8(draw)
    if at is None:
        return recipe
    dtype, (_, bk), ue8m0, rows, k, _ = at
    return dataclasses.replace(recipe, rows=rows, groups=math.ceil(k / bk), group_size=bk, fp8_dtype=dtype,
                               use_ue8m0=ue8m0)  # fmt: skip


def block_mm(draw, recipe):
    at = _fp8(draw)
    if at is None:
        return recipe
    dtype, (bn, bk), _, m, k, n = at
    return dataclasses.replace(recipe, m=m, n=block_columns(n, bn), k=k, fp8_dtype=dtype, block_size=(bn, bk))


def w4a16(draw, recipe):
    groups = pinned_values("quant.w4a16")
    linear = _linear(draw) if groups else None
    if linear is None:
        return recipe
    group_size, packing = draw(st.sampled_from(groups))
    m, k, n = linear
    shape = (m, k, min(n, W4_COLUMNS))
    return dataclasses.replace(recipe, shape=shape, group_size=group_size, packing=packing)


@st.composite
def at_model(draw, default, adapt):
    """``default``'s recipe, put at the model's pins by ``adapt`` in a profile run."""
    return adapt(draw, draw(default))
