"""How a backend's quantized values and scales are judged (spec/quant.md, QUANT-TOL).

``check_on_grid`` judges ``q`` against the exact quotient of ``x`` by the backend's OWN scale: within
half the grid's spacing there plus the tie slack of a float32 quotient. ``check_scales`` compares
scales with the oracle's under the ``quant-scale`` row (dtype float32, the expected shape).
``check_quantized`` checks a quantizer's returned pair (a tuple of two tensors, their dtypes).
"""

from __future__ import annotations

import torch

from conformance.checks import assert_close, check, check_output
from conformance.tolerances import tolerance

U32 = 2.0**-24
TIE_SLACK = 4 * U32  # QUANT-TOL: a float32 quotient with up to two roundings, relative to |t|


def grid_spacing(t: torch.Tensor, grid: torch.dtype) -> torch.Tensor:
    """QUANT-TOL: 1 for int8; for an fp8 format the spacing of |t|'s binade (3 mantissa bits), the
    subnormal spacing below the smallest normal."""
    if grid == torch.int8:
        return torch.ones_like(t)
    tiny = float(torch.finfo(grid).smallest_normal)
    return torch.exp2(torch.floor(torch.log2(t.abs().clamp_min(tiny))) - 3)


def quotient(x: torch.Tensor, scale: torch.Tensor, grid: torch.dtype) -> torch.Tensor:
    """The exact x / scale in float64, saturated to the grid's range (scale broadcast over x)."""
    top = 127.0 if grid == torch.int8 else float(torch.finfo(grid).max)
    return (x.detach().cpu().double() / scale.detach().cpu().double()).clamp(-top, top)


def check_on_grid(q, x, scale, *, grid: torch.dtype, clause: str, context: str) -> None:
    """|q - t| <= spacing(t) / 2 + TIE_SLACK |t|, t = x / scale (the backend's scale, broadcast):
    q is the nearest grid value of t, either neighbour within the slack of a midpoint."""
    __tracebackhide__ = True
    t = quotient(x, scale, grid)
    got = q.detach().cpu().double()
    excess = (got - t).abs() - (grid_spacing(t, grid) / 2 + TIE_SLACK * t.abs())
    excess = torch.where(torch.isnan(got), torch.inf, excess)
    worst = int(excess.flatten().argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), excess.shape))
    check(
        not bool((excess > 1e-12).any()),
        clause=clause,
        message=f"{context}: q {got[index].item():g} at {index}, expected the nearest {grid} value of "
        f"x / scale = {t[index].item():.6g} (x {x.detach().cpu()[index].item():.6g}, the backend's scale)",
        relation=f"q {got[index].item():g}, expected round({t[index].item():.6g}) at {index}",
    )


def check_quantized(out, x, *, q_dtype: torch.dtype, scale_shape: tuple, clause: str, context: str):
    """A quantizer's ``(q, scale)``: q of x's shape and ``q_dtype``, scale float32 of ``scale_shape``."""
    __tracebackhide__ = True
    check(
        isinstance(out, tuple | list) and len(out) == 2,
        clause=clause,
        message=f"{context}: returned {type(out).__name__}, expected the pair (q, scale)",
    )
    q, scale = out
    check_output(q, x, clause=clause, context=f"{context}: q", dtype=q_dtype, device=x.device)
    check_output(scale, x, clause=clause, context=f"{context}: scale", dtype=torch.float32, device=x.device)
    check(
        tuple(q.shape) == tuple(x.shape) and tuple(scale.shape) == tuple(scale_shape),
        clause=clause,
        message=f"{context}: q {tuple(q.shape)}, scale {tuple(scale.shape)}; expected {tuple(x.shape)}, "
        f"{tuple(scale_shape)}",
    )
    return q, scale


def check_scales(scale, want, *, clause: str, context: str) -> None:
    """QUANT-TOL: float32 scales within the quant-scale row of the oracle's."""
    __tracebackhide__ = True
    assert_close(
        scale,
        want,
        clause=clause,
        context=f"{context}: scale",
        dtype=torch.float32,
        tol=tolerance("quant-scale", torch.float32),
    )
