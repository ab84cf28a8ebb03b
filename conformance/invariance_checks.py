"""Bitwise comparisons for spec/invariance.md, with the vacuity guards of INV-VACUITY.

``Side`` says how one side of a comparison ran (its batch, the positions of the compared rows in
it, its splits or chunks); ``check_bitwise`` demands the same bits and refuses, as a defect of the
suite, two sides described alike: the proof that the comparison could have failed, recorded as a
Hypothesis event of each example (``--hypothesis-show-statistics``) and in every failure.
``check_informative`` refuses outputs that would pass any bitwise comparison (INV-VACUITY), and
``check_repeat`` is DET-RUN, checked first by every property.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from hypothesis import event
from hypothesis.errors import InvalidArgument

from conformance.checks import check_output
from conformance.errors import ConformanceError

# Integer views of each float dtype's bits (bitwise equality tells -0.0 from +0.0 and reads NaN as bits).
_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
         torch.bfloat16: torch.int16}  # fmt: skip


@dataclass(frozen=True)
class Side:
    """How one side ran: ``what`` (e.g. "batch of 300 rows"), where the compared rows sat in it."""

    what: str
    positions: tuple[int, ...]

    def describe(self) -> str:
        shown = ", ".join(map(str, self.positions[:6])) + (", ..." if len(self.positions) > 6 else "")
        return f"{self.what} (compared rows at {shown})"


def require_distinct(a: Side, b: Side) -> None:
    """INV-VACUITY: the two sides ran differently, and row 0 is not all that is compared; else the
    property itself is wrong (an AssertionError, never a verdict on the backend)."""
    if a == b:
        raise AssertionError(f"vacuous invariance comparison: both sides are {a.describe()}")
    if len(a.positions) < 2 and set(a.positions) | set(b.positions) <= {0}:
        raise AssertionError(f"vacuous invariance comparison: only row 0 compared ({a.describe()})")


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu().contiguous()
    return t.view(_BITS[t.dtype]) if t.dtype in _BITS else t


def check_bitwise(got, want: torch.Tensor, *, clause: str, context: str, sides: tuple[Side, Side]) -> None:
    """``got`` (side 0) has ``want``'s (side 1) dtype, shape and bits; else ``clause`` fails naming the
    first differing element, both values and both sides (the proof they ran differently)."""
    __tracebackhide__ = True  # a failure shows its verdict, not this source
    require_distinct(*sides)
    with contextlib.suppress(
        InvalidArgument
    ):  # the proof in --hypothesis-show-statistics (outside a test: none)
        event(f"{clause} compared: {sides[0].what} vs {sides[1].what}")
    proof = f"{sides[0].describe()} vs {sides[1].describe()}"
    check_output(
        got, want, clause=clause, context=f"{context}; {proof}", dtype=want.dtype, device=want.device
    )
    if tuple(got.shape) != tuple(want.shape):
        shapes = f"shape {tuple(got.shape)} vs {tuple(want.shape)}"
        raise ConformanceError(clause, f"{context}: {shapes}; {proof}", relation=shapes)
    differ = _bits(got) != _bits(want)
    if not bool(differ.any()):
        return
    index = tuple(int(i) for i in differ.nonzero()[0])
    a, b = got.detach().cpu()[index].item(), want.detach().cpu()[index].item()
    relation = f"got {a!r} in {sides[0].what}, {b!r} in {sides[1].what} at {index}{_rows(sides, index)}"
    raise ConformanceError(
        clause,
        f"{context}: {int(differ.sum())} of {differ.numel()} elements differ in their bits "
        f"(dtype {got.dtype}, shape {tuple(got.shape)}); first at {index}{_rows(sides, index)}: {a!r} vs "
        f"{b!r}; {proof}",
        dtype=got.dtype,
        relation=relation,
        metamorphic=True,
    )


def _rows(sides: tuple[Side, Side], index: tuple) -> str:
    """Where the differing element's row sat on each side (the compared rows follow ``positions``)."""
    i = index[0] if index else 0
    if all(i < len(s.positions) for s in sides):
        return f" (row {sides[0].positions[i]} vs row {sides[1].positions[i]})"
    return ""


def check_informative(out: torch.Tensor, *, context: str) -> None:
    """INV-VACUITY: the compared output is finite and not one value in every row (with two rows or more)."""
    __tracebackhide__ = True
    values = out.detach().cpu().double()
    if not bool(torch.isfinite(values).all()):
        raise ConformanceError("INV-VACUITY", f"{context}: non-finite outputs; a bitwise comparison of "
                               "them judges nothing", relation="non-finite outputs")  # fmt: skip
    rows = values.reshape(values.shape[0], -1) if values.dim() else values.reshape(1, 1)
    if rows.shape[0] >= 2 and bool((rows == rows[:1]).all()):
        first = rows[0, 0].item()
        raise ConformanceError("INV-VACUITY", f"{context}: every row is the same ({first!r}, ...); a bitwise "
                               "comparison of them judges nothing", relation="constant rows")  # fmt: skip


def check_repeat(call, *, context: str, side: Side) -> tuple:
    """DET-RUN, first: ``call()`` twice (it makes fresh inputs each time) gives the same bits in every
    output; returns the first call's outputs as a tuple."""
    __tracebackhide__ = True
    first, second = _tuple(call()), _tuple(call())
    again = Side(f"{side.what}, run again", side.positions)
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        check_bitwise(b, a, clause="DET-RUN", context=f"{context}: output {i}", sides=(again, side))
    return first


def _tuple(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)
