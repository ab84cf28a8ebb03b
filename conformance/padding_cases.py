"""The row-wise ops of spec/padding.md (PAD-ROWS, PAD-UNINIT) as one shape: a ``RowCase`` holds an
op's token-major inputs (rows on dim 0), calls it on a backend or its oracle with the other
arguments bound, pads its rows the way graph capture does, and judges the real rows of the result
by the op's own family rule (NORM-TOL, ACT-TOL, MOE-TOL, ROPE-TOL), so padding never loosens one.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from conformance.checks import assert_close, check
from conformance.moe_checks import check_fused
from conformance.strategies.activations import gated_inputs
from conformance.strategies.common import FLOAT_DTYPES
from conformance.strategies.moe_fused import fused_recipes
from conformance.strategies.norms import norm_inputs
from conformance.strategies.padding import RowPadding
from conformance.strategies.rope import rope_recipes
from conformance.tolerances import pair_scale, up_scale
from reference import activations, moe, norms, rope

# Row ops whose bug shows on every row: small inputs keep the properties cheap.
SMALL = 1 << 12
ORACLES = {
    "rms_norm": norms,
    "fused_add_rms_norm": norms,
    "silu_and_mul": activations,
    "fused_moe": moe,
    "rotary_embedding": rope,
}
OPS = tuple(ORACLES)


@dataclass
class RowCase:
    """``rows``: the op's token-major inputs; ``call(impl, rows)``: the op's outputs as a tuple (the
    other arguments moved to the rows' device); ``pads``: how each input's padding rows are made;
    ``judge(got, want, real_rows, clause, context)``: the family's comparison of the real rows."""

    op: str
    rows: tuple[torch.Tensor, ...]
    call: Callable
    pads: tuple[Callable, ...]
    judge: Callable
    about: str

    def run(self, impl, rows, *, clause: str, context: str) -> tuple[torch.Tensor, ...]:
        """The outputs of ``impl`` on ``rows``, each checked to be a tensor with a row per input row."""
        out = self.call(impl, rows)
        for t in out:
            check(
                isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[0] == rows[0].shape[0],
                clause=clause,
                message=f"{context}: returned {_summary(t)}, expected {rows[0].shape[0]} rows",
            )
        return out

    def oracle(self):
        return self.call(ORACLES[self.op], tuple(t.cpu() for t in self.rows))

    def padded(self, padding: RowPadding) -> tuple[torch.Tensor, ...]:
        return tuple(pad(t, padding) for pad, t in zip(self.pads, self.rows, strict=True))


def _summary(t) -> str:
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    return f"a {t.dtype} tensor of shape {tuple(t.shape)}"


def _fill(t, padding: RowPadding):
    return padding.pad(t)


def _as_outputs(out) -> tuple:
    return tuple(out) if isinstance(out, tuple | list) else (out,)


def norm_case(op: str, data, device, dtypes) -> RowCase:
    recipe = data.draw(norm_inputs(max_numel=SMALL, dtypes=dtypes), label="recipe")
    x, residual, weight = recipe.make(device)
    x, residual = x.reshape(-1, x.shape[-1]), residual.reshape(-1, x.shape[-1])
    fused = "fused" in op
    rows = (x, residual) if fused else (x,)

    def call(impl, rows):
        return _as_outputs(getattr(impl, op)(*rows, weight.to(rows[0].device), eps=recipe.eps))

    def judge(got, want, real, clause, context):
        for a, e in zip(got, want, strict=True):  # NORM-TOL: the row of x's dtype
            assert_close(a, e, clause=clause, family="norms", context=context, dtype=x.dtype, device=device)

    return RowCase(op, rows, call, (_fill,) * len(rows), judge, f"{recipe.describe()}, eps {recipe.eps:g}")


def silu_case(op: str, data, device, dtypes) -> RowCase:
    recipe = data.draw(gated_inputs(max_numel=SMALL, dtypes=dtypes), label="recipe")
    x = recipe.make(device)
    x = x.reshape(-1, x.shape[-1])

    def call(impl, rows):
        return _as_outputs(impl.silu_and_mul(*rows))

    def judge(got, want, real, clause, context):  # ACT-TOL: the absolute term scaled by |up|
        assert_close(got[0], want[0], clause=clause, family="activations", context=context,
                     atol_scale=up_scale(real[0]), dtype=x.dtype, device=device)  # fmt: skip

    return RowCase(op, (x,), call, (_fill,), judge, f"x {tuple(x.shape)} {x.dtype}")


def _pad_routing_weights(t, padding: RowPadding):
    """Padded rows' router weights: NaN with a NaN fill (MOE-PADDED: the field's torch routers give a
    row with NaN logits NaN weights), else positive ones."""
    if padding.fill == "nan":
        return padding.pad(t)
    gen = torch.Generator().manual_seed(padding.seed + 1)
    return torch.cat([t, torch.rand(padding.rows, t.shape[1], generator=gen).to(t.dtype).to(t.device)])


def _pad_ids(experts: int):
    def pad(t, padding: RowPadding):
        """Padded rows' expert ids: valid and distinct in a row (the router's, MOE-PADDED), or a
        previous step's rows."""
        if padding.fill == "stale":
            return padding.pad(t)
        gen = torch.Generator().manual_seed(padding.seed + 2)
        ids = [torch.randperm(experts, generator=gen)[: t.shape[1]] for _ in range(padding.rows)]
        return torch.cat([t, torch.stack(ids).to(t.dtype).to(t.device)])

    return pad


def fused_moe_case(op: str, data, device, dtypes) -> RowCase:
    recipe = data.draw(fused_recipes(dtypes=dtypes), label="recipe")
    x, w13, w2, weights, ids = recipe.make(device)

    def call(impl, rows):
        on = rows[0].device
        return _as_outputs(impl.fused_moe(rows[0], w13.to(on), w2.to(on), rows[1], rows[2], **recipe.options))

    def judge(got, want, real, clause, context):  # MOE-TOL
        inputs = (real[0].cpu(), w13.cpu(), w2.cpu(), real[1].cpu(), real[2].cpu())
        check_fused(got[0], want[0], inputs, recipe.options, clause=clause, context=context)

    pads = (_fill, _pad_routing_weights, _pad_ids(recipe.experts))
    return RowCase(op, (x, weights, ids), call, pads, judge, repr(recipe))


def _pad_positions(t, padding: RowPadding):
    """Padded rows' positions: 0 (a zeroed buffer) or a previous step's, inside the cache."""
    if padding.fill == "stale":
        return padding.pad(t)
    return torch.cat([t, torch.zeros(padding.rows, dtype=t.dtype, device=t.device)])


def rotary_case(op: str, data, device, dtypes) -> RowCase:
    recipe = data.draw(rope_recipes(dtypes=dtypes), label="recipe")
    neox = data.draw(st.booleans(), label="is_neox_style")
    positions, q, k, cache = recipe.make(device)
    q, k = q.contiguous(), k.contiguous()

    def call(impl, rows):
        return _as_outputs(impl.rotary_embedding(*rows, cache.to(rows[0].device), is_neox_style=neox))

    def judge(got, want, real, clause, context):  # ROPE-TOL: per pair, by the token's cache row
        cos_sin = cache.cpu().double()[real[0].cpu().long()]
        for a, e, x in zip(got, want, real[1:], strict=True):
            scale = pair_scale(x.cpu(), cos_sin, neox)
            assert_close(a, e, clause=clause, family="rope", context=context, atol_scale=scale,
                         dtype=x.dtype, device=device)  # fmt: skip

    pads = (_pad_positions, _fill, _fill)
    return RowCase(op, (positions, q, k), call, pads, judge, f"{recipe.describe()}, neox {neox}")


BUILDERS = {
    "rms_norm": norm_case,
    "fused_add_rms_norm": norm_case,
    "silu_and_mul": silu_case,
    "fused_moe": fused_moe_case,
    "rotary_embedding": rotary_case,
}


def row_case(op: str, data, device, dtypes=FLOAT_DTYPES) -> RowCase:
    """One drawn call of ``op`` with inputs of ``dtypes`` (the family's own strategies)."""
    return BUILDERS[op](op, data, device, dtypes)


DETERMINISM_WARNINGS = ".*(deterministic implementation|Deterministic behavior)"


@contextlib.contextmanager
def poisoned_allocations():
    """PAD-UNINIT: inside, every ``torch.empty*`` (a backend's outputs and workspaces) holds NaN, and
    integers their largest value: PyTorch fills uninitialised memory so under deterministic mode
    (``torch.utils.deterministic.fill_uninitialized_memory``); ``warn_only`` keeps the ops that have no
    deterministic form running (their warning is silenced here). The previous modes come back after."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.utils.deterministic.fill_uninitialized_memory = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with warnings.catch_warnings():
            # an op without a deterministic form (and cuBLAS without its workspace setting) warns
            warnings.filterwarnings("ignore", message=DETERMINISM_WARNINGS)
            yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def allocations_are_poisoned(device) -> bool:
    """Whether ``poisoned_allocations`` reaches ``device``: an empty tensor made there is all NaN."""
    with poisoned_allocations():
        return bool(torch.empty(64, device=device).isnan().all())
