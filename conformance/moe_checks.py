"""How a backend's routing and expert outputs are judged (spec/moe.md, MOE-TIES, MOE-PADDED, MOE-TOL).

``check_routing`` calls ``select_experts`` and ``judge_routing`` judges its routing (or one a
capture recorded, opconform replay): it accepts any slot order and any choice between
selection scores equal within the tie tolerance (scores rounded to the logits' dtype included);
a padded row's ids must be valid, its weights are free (``check_padded_finite``: SHOULD); the
weights (float32 or the logits' dtype) are compared with the oracle's weights of the backend's own
ids under the ``moe-routing`` row of ``routing_precision``, a failure opening with the weights' sum
when that is off (``sum_phrase``). ``check_fused`` compares a fused_moe output with the oracle's
under the ``moe`` row, its absolute term scaled by ``moe_magnitude``; ``check_shared`` the
shared-expert slots.
"""

from __future__ import annotations

import torch

from conformance.checks import assert_close, check, check_output, describe
from conformance.strategies.moe import score_rounding, tie_tolerance
from conformance.tolerances import Tolerance, moe_magnitude, routing_atol_scale, routing_precision, tolerance
from reference import moe as oracle

ROUTING_TOL = tolerance("moe-routing", torch.float32)


def routing_tol(weights: torch.Tensor, logits: torch.Tensor, *, both_sides: bool = False) -> Tolerance:
    """MOE-TOL: the moe-routing row of routing_precision; twice it when both sides round (MOE-PERMUTE:
    the backend against itself)."""
    tol = tolerance("moe-routing", routing_precision(weights.dtype, logits.dtype))
    return Tolerance(rtol=2 * tol.rtol, atol=2 * tol.atol) if both_sides else tol


def sum_phrase(got_w, want_w, options: dict, tol: Tolerance = ROUTING_TOL) -> str | None:
    """MOE-RENORM, MOE-RSF-ONCE: the decisive relation of wrong weights, the sum of a token's k weights
    against what renormalize and routed_scaling_factor make it ("weights sum to 1.000, expected
    routed_scaling_factor 2.5 (renormalize=True)"), for the token whose sum is furthest off; None when
    every sum is within twice ``tol``'s rtol (then the weights are wrong one by one)."""
    got, want = got_w.detach().cpu().double().sum(-1), want_w.detach().cpu().double().sum(-1)
    off = (got - want).abs() / want.abs().clamp_min(1e-30)
    if not bool((off > 2 * tol.rtol).any()):
        return None
    t = int(off.argmax())
    rsf, renorm, scoring = options["routed_scaling_factor"], options["renormalize"], options["scoring"]
    factor = f"routed_scaling_factor {rsf:g}" if rsf != 1 else "1"
    if scoring == "topk_softmax":
        expected = f"{factor} (scoring='topk_softmax')"
    elif renorm:
        expected = f"{factor} (renormalize=True)"
    else:
        scores = f"the scores' sum {float(want[t]) / rsf:#.4g}"
        expected = f"{float(want[t]):#.4g} = {factor} x {scores} (renormalize=False)"
    return f"token {t}: weights sum to {float(got[t]):#.4g}, expected {expected}"


def call_routing(backend, logits, bias, options: dict, *, clause: str, context: str):
    """The backend's (weights, ids), checked for shape, dtypes (weights float32 or the logits' dtype,
    MOE-SELECT) and device."""
    out = backend.select_experts(logits, correction_bias=bias, **options)
    check(
        isinstance(out, tuple | list) and len(out) == 2,
        clause=clause,
        message=f"{context}: returned {type(out).__name__}, expected the pair (weights, ids)",
    )
    weights, ids = out
    shape = (logits.shape[0], options["top_k"])
    want = torch.empty(shape)
    check_output(weights, want, clause=clause, context=f"{context}: weights", device=logits.device)
    check_output(ids, want, clause=clause, context=f"{context}: ids", device=logits.device)
    check(
        weights.dtype in (torch.float32, logits.dtype),
        clause=clause,
        message=f"{context}: weights of dtype {weights.dtype}; expected float32 or the logits' dtype "
        f"{logits.dtype}",
    )
    check(
        tuple(weights.shape) == shape
        and tuple(ids.shape) == shape
        and ids.dtype in (torch.int32, torch.int64),
        clause=clause,
        message=f"{context}: weights {tuple(weights.shape)}, ids {ids.dtype} "
        f"{tuple(ids.shape)}; expected {shape} and int32/int64 ids",
    )
    return weights, ids


def check_valid_ids(ids: torch.Tensor, experts: int, *, clause: str, context: str) -> None:
    """k distinct ids in [0, E) per token."""
    ids = ids.cpu().long()
    in_range = bool(((ids >= 0) & (ids < experts)).all())
    distinct = ids.shape[1] < 2 or bool((ids.sort(-1).values.diff(dim=-1) != 0).all())
    check(
        in_range and distinct,
        clause=clause,
        message=f"{context}: ids must be distinct and in [0, {experts}), got {ids.tolist()}",
    )


def check_routing(backend, device, recipe, clause: str, logits=None, bias=None):
    """MOE-SELECT as judged by MOE-TIES (any order, ties accepted) and MOE-PADDED; returns (weights, ids)."""
    if logits is None:
        logits, bias = recipe.make(device)
    options = recipe.options
    bias_name = None if bias is None else f"{recipe.bias} ({str(bias.dtype).removeprefix('torch.')})"
    context = describe(
        backend,
        device,
        "select_experts",
        **options,
        correction_bias=bias_name,
        logits=f"{str(logits.dtype).removeprefix('torch.')} {tuple(logits.shape)}",
    )
    weights, ids = call_routing(backend, logits, bias, options, clause=clause, context=context)
    judge_routing(weights, ids, logits, bias, options, clause=clause, context=context)
    return weights, ids


def judge_routing(weights, ids, logits, bias, options: dict, *, clause: str, context: str) -> None:
    """MOE-TIES and MOE-PADDED on a routing already made (a backend's, or one a capture recorded):
    valid distinct ids, each token's choice as good as the oracle's up to ties, and the weights
    equal to the oracle's weights of those ids (a padded row's weights are not judged)."""
    shape = (logits.shape[0], options["top_k"])
    check(
        tuple(weights.shape) == shape and tuple(ids.shape) == shape and not ids.is_floating_point(),
        clause=clause,
        message=f"{context}: weights {tuple(weights.shape)}, ids {ids.dtype} {tuple(ids.shape)}; "
        f"expected {shape}",
    )
    check_valid_ids(ids, logits.shape[-1], clause=clause, context=context)
    cpu_logits, cpu_bias = logits.cpu(), None if bias is None else bias.cpu()
    padded = oracle.padded_rows(cpu_logits)
    got_w, got_i = weights.detach().cpu(), ids.cpu().long()
    real = ~padded
    scores, sel = oracle.selection_scores(cpu_logits, scoring=options["scoring"], correction_bias=cpu_bias)
    allowed = oracle.allowed_experts(
        sel,
        num_groups=options["num_groups"],
        topk_group=options["topk_group"],
        group_score=options["group_score"],
    )
    _, want_i = oracle.select_experts(cpu_logits, correction_bias=cpu_bias, **options)
    inside = allowed.gather(1, got_i).all(dim=-1) | padded
    bad_rows = (~inside).nonzero().flatten().tolist()
    check(
        not bad_rows,
        clause=clause,
        message=f"{context}: token(s) {bad_rows} chose experts outside the kept "
        f"groups: got {got_i[bad_rows].tolist()}, expected {want_i[bad_rows].sort(-1).values.tolist()}",
    )
    got_sel = sel.gather(1, got_i).sort(-1, descending=True).values
    want_sel = sel.gather(1, want_i).sort(-1, descending=True).values
    rounding = score_rounding(scores, scoring=options["scoring"], logits_dtype=logits.dtype)
    worse = ((got_sel - want_sel).abs() > tie_tolerance(want_sel, rounding)).any(dim=-1) & real
    rows = worse.nonzero().flatten().tolist()
    check(
        not rows,
        clause=clause,
        message=f"{context}: token(s) {rows} chose experts "
        f"{got_i[rows].sort(-1).values.tolist()}; the oracle chooses {want_i[rows].sort(-1).values.tolist()} "
        f"(selection scores {got_sel[rows].tolist()} vs {want_sel[rows].tolist()})",
    )
    expected = oracle.routing_weights(
        cpu_logits,
        got_i,
        scoring=options["scoring"],
        renormalize=options["renormalize"],
        routed_scaling_factor=options["routed_scaling_factor"],
    )
    if bool(real.any()):
        precision = routing_precision(weights.dtype, logits.dtype)
        scale = routing_atol_scale(cpu_logits, got_i, expected, scoring=options["scoring"],
                                   renormalize=options["renormalize"], dtype=precision)  # fmt: skip
        tol = routing_tol(weights, logits)
        phrase = sum_phrase(got_w[real], expected[real], options, tol)
        assert_close(
            got_w[real],
            expected[real],
            clause=clause,
            context=f"{context}: " + (f"{phrase}; weights by id" if phrase else "weights by id"),
            tol=tol,
            atol_scale=scale[real],
        )


def check_padded_finite(weights, logits, *, clause: str, context: str) -> None:
    """MOE-PADDED-FINITE: the weights of the rows with a NaN or infinite logit are finite."""
    padded = oracle.padded_rows(logits.cpu())
    got = weights.detach().cpu()[padded]
    check(
        bool(torch.isfinite(got).all()),
        clause=clause,
        message=f"{context}: a padded row (NaN/Inf logits) got non-finite weights {got.tolist()}",
    )


def check_fused(got, want, inputs, options: dict, *, clause: str, context: str, expected_as="expected"):
    """MOE-TOL: the ``moe`` row of x's dtype, atol scaled by moe_magnitude of ``inputs``."""
    x = inputs[0]
    assert_close(
        got,
        want,
        clause=clause,
        context=context,
        family="moe",
        dtype=x.dtype,
        device=x.device,
        atol_scale=moe_magnitude(*inputs, **options),
        expected_as=expected_as,
    )


def check_shared(backend, device, recipe, on_output, shared, w, i, clause: str) -> None:
    """MOE-SHARED: append_shared_experts(w, i) equals the oracle (w and i views of wider rows when
    ``recipe.strided``, MOE-VIEWS)."""
    if recipe.strided:  # rows twice as far apart (views of a wider buffer)
        w, i = (torch.cat([t, t], dim=-1)[:, : recipe.top_k] for t in (w, i))
    shared_ids = tuple(range(recipe.experts, recipe.experts + shared))
    kw = dict(
        shared_ids=shared_ids, rsf_on_output=on_output, routed_scaling_factor=recipe.routed_scaling_factor
    )
    context = describe(backend, device, "append_shared_experts", **kw)
    got_w, got_i = backend.append_shared_experts(w, i, **kw)
    want_w, want_i = oracle.append_shared_experts(w.cpu(), i.cpu(), **kw)
    # MOE-SHARED names the outputs' dtypes: ids of topk_ids' dtype, weights float32 or the input's
    check_output(got_i, want_i, clause=clause, context=f"{context}: ids", dtype=i.dtype, device=i.device)
    check_output(got_w, want_w, clause=clause, context=f"{context}: weights", device=w.device)
    check(
        got_w.dtype in (torch.float32, w.dtype),
        clause=clause,
        message=f"{context}: weights of dtype {got_w.dtype}; expected float32 or the input's {w.dtype}",
    )
    check(
        torch.equal(got_i.cpu().long(), want_i),
        clause=clause,
        message=f"{context}: ids {got_i.tolist()}, expected {want_i.tolist()}",
    )
    tol = (
        tolerance("moe-routing", torch.float32)
        if w.dtype == torch.float32
        else tolerance("moe", torch.bfloat16)
    )
    assert_close(got_w, want_w, clause=clause, context=context, tol=tol)
