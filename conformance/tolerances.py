"""The tolerance table: |actual - expected| <= atol + rtol * |expected|, per family and dtype.

``expected`` is the float64 oracle evaluated on the very values the backend received (inputs
are drawn in the tested dtype, then upcast), so the table only has to absorb the backend's own
rounding. Every entry is justified in spec/tolerances.md (clause TOL-TABLE); a self-test checks
that the spec's table and this one agree. Never widen an entry to make a test pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# ROPE-TOL's and QUANT-TOL's atol scales, re-exported: their own module keeps this table readable.
from conformance.atol_scales import QUANT_SUM_K as QUANT_SUM_K
from conformance.atol_scales import angle_scale, gemm_scale, pair_scale


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
# grows by DPM_CONVERSION_ROUNDINGS * eps/2 * sum_j |c_j| g_j (dpm_atol_scale).
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

# The norms family (spec/norms.md, NORM-TOL): about 4 unit roundoffs in fp16/bf16 (the LLaMA order
# rounds twice, a kernel normalizing the rounded residual sum a third time); measured on native at
# most 2.8e-7 (float32), 9.8e-4 (float16), 7.7e-3 (bfloat16) relative (spec/tolerances.md). With
# inputs of several dtypes (NORM-MIXED) a normalized output takes the row of x's dtype, a residual
# the row of its own.
TOLERANCES["norms"] = {
    torch.float64: Tolerance(rtol=1e-7, atol=1e-7),
    torch.float32: Tolerance(rtol=1.3e-6, atol=1e-5),
    torch.float16: Tolerance(rtol=2e-3, atol=1e-5),
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=1e-5),
}


def both_sides(tol: Tolerance) -> Tolerance:
    """TOL-TABLE's metamorphic rule: a comparison of two results of one backend (the view against its
    contiguous copy, a ragged batch against its sequences alone) allows both sides' rounding. If
    |a - e| and |b - e| are each at most atol s + rtol |e| of the exact e, then |e| <= (|b| + atol s) /
    (1 - rtol), so |a - b| <= 2 (atol s + rtol |b|) / (1 - rtol): the row with both terms scaled by
    2 / (1 - rtol), applied to the other side b (any family, any atol scale)."""
    factor = 2.0 / (1.0 - tol.rtol)
    return Tolerance(rtol=tol.rtol * factor, atol=tol.atol * factor)


# The scaling rules: how a family refines TOL-TABLE (each one justified in spec/tolerances.md and
# in its family's clause). They scale the absolute term only (``assert_close(atol_scale=...)``) or
# derive a bound from the table; none changes the table.


def up_scale(x: torch.Tensor, *, limit: float | None = None, **_options) -> torch.Tensor:
    """ACT-TOL: the absolute tolerance applies to the activation, so it scales with max(1, |up|)
    (|up| clamped to the limit, for the clamped op)."""
    up = x[..., x.shape[-1] // 2 :].detach().cpu().double().abs()
    return (up if limit is None else up.clamp(max=limit)).clamp_min(1.0)


def swiglu_step_bound(limit: float, dtype: torch.dtype) -> float:
    """ACT-SWIGLU-STEP-BOUND: limit^2 up to one rounding of the output (the activations row's
    rtol and atol)."""
    tol = tolerance("activations", dtype)
    return limit * limit * (1 + tol.rtol) + tol.atol


def oai_up_scale(x: torch.Tensor, *, limit: float | None, interleaved: bool, **_options) -> torch.Tensor:
    """ACT-TOL for ACT-SWIGLU-OAI: the activation's absolute error is multiplied by (up + 1), so the
    atol scales with max(1, |up.clamp(-limit, limit) + 1|), up the interleaved or right-half columns."""
    up = x[..., 1::2] if interleaved else x[..., x.shape[-1] // 2 :]
    up = up.detach().cpu().double()
    if limit is not None:
        up = up.clamp(-limit, limit)
    return (up + 1).abs().clamp_min(1.0)


def situ_up_scale(x: torch.Tensor, *, linear_beta: float | None, **_options) -> torch.Tensor:
    """ACT-TOL for ACT-SITU: the activation is multiplied by the soft-clipped up, so the atol scales
    with max(1, |linear_beta tanh(up / linear_beta)|) (|up| when linear_beta is None)."""
    up = x[..., x.shape[-1] // 2 :].detach().cpu().double()
    if linear_beta is not None:
        up = linear_beta * torch.tanh(up / linear_beta)
    return up.abs().clamp_min(1.0)


def situ_bound(beta: float, linear_beta: float, dtype: torch.dtype) -> float:
    """ACT-SITU-BOUND: beta * linear_beta up to one rounding of the output (the activations row's
    rtol and atol): in float32, tanh and sigmoid round to exactly 1 for large inputs."""
    tol = tolerance("activations", dtype)
    return beta * linear_beta * (1 + tol.rtol) + tol.atol


# ACT-TOL-ROUNDED (spec/tolerances.md, "Every intermediate rounded"): the GELU look-alikes, the
# gpt-oss SwiGLU and the clamp-before-SiLU op as the field's model code writes them, one elementwise
# op at a time, each result rounded to x's dtype. Each function is the op's evaluation order: ``r``
# marks a rounded arithmetic result or a constant held in the dtype (half an ulp, u), ``f`` a rounded
# tanh or sigmoid (one ulp, 2u: a float32 evaluation rounded to the dtype, or a float32 libm result).
# Clamps are exact.
def _new_gelu_steps(x, r, f, **_options):
    inner = r(r(math.sqrt(2.0 / math.pi)) * r(x + r(r(0.044715) * r(x**3))))
    return r(0.5 * x) * r(1.0 + f(torch.tanh(inner)))


def _fast_gelu_steps(x, r, f, **_options):
    inner = r(r(x * r(0.7978845608)) * r(1.0 + r(r(r(0.044715) * x) * x)))
    return r(0.5 * x) * r(1.0 + f(torch.tanh(inner)))


def _quick_gelu_steps(x, r, f, **_options):
    return x * f(torch.sigmoid(r(r(1.702) * x)))


def _swiglu_oai_steps(x, r, f, *, alpha, limit, interleaved, **_options):
    gate, up = (x[..., ::2], x[..., 1::2]) if interleaved else x.tensor_split(2, dim=-1)
    if limit is not None:
        gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    return r(up + 1.0) * r(gate * f(torch.sigmoid(r(gate * r(alpha, gate)))))


def _silu_clamped_steps(x, r, f, *, limit, **_options):
    # vLLM's SiluAndMulWithClamp.forward_native, gate * sigmoid(alpha * gate) * (up + beta) with
    # alpha = 1 and beta = 0: alpha * gate and up + beta are exact, the sigmoid and both products round.
    gate, up = x.tensor_split(2, dim=-1)
    if limit is not None:
        gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    return r(gate * f(torch.sigmoid(gate))) * up


ROUNDED_STEPS = {
    "silu_clamped_and_mul": _silu_clamped_steps,
    "new_gelu": _new_gelu_steps,
    "fast_gelu": _fast_gelu_steps,
    "quick_gelu": _quick_gelu_steps,
    "swiglu_oai_and_mul": _swiglu_oai_steps,
}


def rounding_bound(op: str, x: torch.Tensor, **options) -> torch.Tensor:
    """ACT-TOL-ROUNDED: sum_i rho_i |v_i * d out / d v_i| per output element, over every rounded
    intermediate v_i of ``op``'s evaluation order (ROUNDED_STEPS; rho_i = u or 2u, u = eps(x.dtype) / 2);
    the output's own rounding is the table's rtol. First-order error propagation with exact partials
    (float64 autograd of out with respect to a relative perturbation of each v_i) at x's exact values."""
    if op not in ROUNDED_STEPS:
        raise ValueError(f"op must be one of {sorted(ROUNDED_STEPS)}, got {op!r}")
    unit = torch.finfo(x.dtype).eps / 2
    v = x.detach().to("cpu", torch.float64)
    perturbations, weights = [], []

    def rounded(value, like=v, *, ulps=0.5):
        if not isinstance(value, torch.Tensor):  # a constant, held per element of ``like``
            value = torch.full_like(like, value)
        delta = torch.zeros_like(value, requires_grad=True)
        perturbations.append(delta)
        weights.append(2 * ulps * unit)
        return value * (1.0 + delta)

    def function(value):
        return rounded(value, ulps=1.0)

    with torch.enable_grad():
        out = ROUNDED_STEPS[op](v, rounded, function, **options)
        grads = torch.autograd.grad(out.sum(), perturbations)
    return sum(w * g.abs() for w, g in zip(weights, grads, strict=True))


def rounded_atol_scale(op: str, x: torch.Tensor, base=None, **options) -> torch.Tensor:
    """ACT-TOL-ROUNDED: the atol scale ``base`` (ACT-TOL's, default 1) plus rounding_bound / atol,
    so the allowed error is the table's plus the bound of every intermediate rounding."""
    atol = tolerance("activations", x.dtype).atol
    return (1.0 if base is None else base) + rounding_bound(op, x, **options) / atol


def value_scale(v: torch.Tensor, q_heads: int, valid_keys: torch.Tensor | None = None) -> torch.Tensor:
    """ATTN-TOL: max(1, max |v|) per (batch, kv head) over the keys in the sequence, per query head."""
    v = v.detach().cpu().double().abs()
    if valid_keys is not None:
        v = v * valid_keys.cpu()[:, None, :, None]
    per_head = v.amax(dim=(2, 3), keepdim=True).clamp_min(1.0)
    return per_head.repeat_interleave(q_heads // v.shape[1], dim=1)


# DPM-TOL: the data prediction may be formed in the model dtype (diffusers does), and g_j bounds
# the magnitudes rounded there; each is rounded at most this many times.
DPM_CONVERSION_ROUNDINGS = 4


def conversion_magnitude(reference, index: int, sample: torch.Tensor, model_output: torch.Tensor):
    """DPM-TOL: the magnitude g whose rounding in the model dtype bounds the data prediction's error:
    epsilon (|x| + sigma_t |m|)/alpha_t; v alpha_t |x| + sigma_t |m|; flow |x| + sigma |m|; sample |m|.

    ``reference`` is the oracle scheduler (reference.scheduler.DPMSolverMultistep) at step ``index``.
    """
    kind = reference.config.prediction_type
    x = sample.detach().to("cpu", torch.float64).abs()
    m = model_output.detach().to("cpu", torch.float64).abs()
    sigma = reference.sigmas[index]
    alpha_t, sigma_t = reference.alpha_sigma(sigma)
    if kind == "epsilon":
        return (x + sigma_t * m) / alpha_t
    if kind == "v_prediction":
        return alpha_t * x + sigma_t * m
    if kind == "flow_prediction":
        return x + sigma * m
    return m


def dpm_atol_scale(dtype: torch.dtype, coefficients, magnitudes) -> torch.Tensor | float:
    """DPM-TOL: the factor on the scheduler row's atol, 1 + 4 (eps/2) sum_j |c_j| g_j / atol, for a
    step with data-prediction coefficients c_j and magnitudes g_j (newest first, conversion_magnitude)."""
    rounding = DPM_CONVERSION_ROUNDINGS * torch.finfo(dtype).eps / 2
    amplified = sum(abs(c) * g for c, g in zip(coefficients, magnitudes, strict=False))
    return 1.0 + rounding * amplified / tolerance("scheduler", dtype).atol


# Every scaling rule above, by name: spec/tolerances.md documents each (tests/test_tolerances.py).
SCALING_RULES = (
    both_sides,
    up_scale,
    swiglu_step_bound,
    oai_up_scale,
    situ_up_scale,
    situ_bound,
    rounding_bound,
    rounded_atol_scale,
    value_scale,
    conversion_magnitude,
    dpm_atol_scale,
)


# --- MoE (spec/moe.md, MOE-TOL), in its own block ------------------------------------------------
# Routing weights take the row of routing_precision (float32 or the logits' dtype). float32: a few
# dozen float32 roundings at most (softmax over E <= 256, the sum of k, two products). float16 and
# bfloat16: 6 unit roundoffs (the score, the renormalising sum and quotient, the factor, the cast:
# first-order bound 5u), plus routing_atol_scale's exponent term. fused_moe: 4 unit roundoffs of the
# output dtype, of the magnitude moe_magnitude bounds (first-order bound 3u; spec/tolerances.md).
TOLERANCES["moe-routing"] = {
    torch.float32: Tolerance(rtol=1e-5, atol=1e-6),
    torch.float16: Tolerance(rtol=3e-3, atol=1e-6),
    torch.bfloat16: Tolerance(rtol=2.4e-2, atol=1e-6),
}
TOLERANCES["moe"] = {
    torch.float32: Tolerance(rtol=1e-5, atol=1e-5),
    torch.float16: Tolerance(rtol=2e-3, atol=2e-3),
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=1.6e-2),
}


def moe_magnitude(x, w13, w2, topk_weights, topk_ids, *, activation, limit, apply_router_weight_on_input,
                  output_scale) -> torch.Tensor:  # fmt: skip
    """MOE-TOL: max(1, M) per output element, M = output_scale * sum_j |w_j| (A_j @ |w2[e_j]|^T), with
    A = H_g (H_u + 1) + 1.1 (H_u + 1) H_g + (H_g + 1) H_u and H = |v| @ |w13[e]|^T >= |h|
    (|act| <= |gate| (|up| + 1); its partials are at most 1.1 (|up| + 1) and |gate| + 1): the first-order
    bound of every rounding of h, the activation and the down projection, relative to magnitudes."""
    v = x.detach().to("cpu", torch.float64).abs()
    weights = topk_weights.detach().to("cpu", torch.float64).abs()
    ids = topk_ids.detach().to("cpu", torch.int64)
    out = torch.zeros_like(v)
    for e in torch.unique(ids).tolist():  # each expert's slots at once (the sums are the same)
        t, j = torch.nonzero(ids == e, as_tuple=True)
        w = weights[t, j][:, None]
        up = w13[e].detach().to("cpu", torch.float64).abs()
        vin = v[t] * w if apply_router_weight_on_input else v[t]
        bound = vin @ up.T  # |h| <= H
        hg, hu = (bound[:, ::2], bound[:, 1::2]) if activation == "swiglu_oai" else bound.tensor_split(2, -1)
        a = hg * (hu + 1) + 1.1 * (hu + 1) * hg + (hg + 1) * hu
        y = a @ w2[e].detach().to("cpu", torch.float64).abs().T
        out.index_put_((t,), y if apply_router_weight_on_input else y * w, accumulate=True)  # as the oracle's
    return (out * float(output_scale)).clamp_min(1.0)


def routing_precision(weights_dtype: torch.dtype, logits_dtype: torch.dtype) -> torch.dtype:
    """MOE-TOL: the dtype whose moe-routing row judges routing weights: the less precise of the weights'
    and the logits' (a router may score in the logits' dtype and return float32, vLLM's CPU router)."""
    return max((weights_dtype, logits_dtype), key=lambda dtype: torch.finfo(dtype).eps)


def routing_atol_scale(router_logits, ids, weights, *, scoring, renormalize, dtype) -> torch.Tensor:
    """MOE-TOL: 1 + u |w_j| (|x_j - lse| + |lse|) / atol per weight of softmax routing without
    renormalisation (exp(x - logsumexp) op by op in ``dtype``: the exponent's two roundings, u of
    ``dtype``), else 1; x the logits (non-finite read as 0), lse their logsumexp per token."""
    w = weights.detach().to("cpu", torch.float64).abs()
    if scoring != "softmax" or renormalize:
        return torch.ones_like(w)
    x = router_logits.detach().to("cpu", torch.float64)
    x = torch.where(torch.isfinite(x), x, torch.zeros_like(x))
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    exponent = (x.gather(1, ids.detach().to("cpu", torch.int64)) - lse).abs() + lse.abs()
    unit = torch.finfo(dtype).eps / 2
    return 1.0 + unit * w * exponent / tolerance("moe-routing", dtype).atol


SCALING_RULES = (*SCALING_RULES, moe_magnitude, routing_atol_scale)
# --- rope (spec/rope.md, ROPE-TOL), in its own block ----------------------------------------------
# "rope": the rotation, atol scaled by pair_scale (a rotated element is formed from two inputs and
# two cache values; computed in the input dtype it rounds the cache, both products and the sum: about
# 2 unit roundoffs of |a| + |b| and one of |e|). "rope-cos-sin": the cache rows, atol scaled by
# angle_scale (a float32 angle p f rounds by u p f). "rope-freq": relative, float32 pow's rounding of
# base^(2i/r) with ln(base') up to about 20 (spec/tolerances.md).
TOLERANCES["rope"] = {
    torch.float64: Tolerance(rtol=1e-7, atol=1e-7),
    torch.float32: Tolerance(rtol=1.3e-6, atol=1e-6),
    torch.float16: Tolerance(rtol=1e-3, atol=2e-3),
    torch.bfloat16: Tolerance(rtol=8e-3, atol=1.6e-2),
}
# float64 is the float32 row: the field forms the angles in float32 whatever inv_freq's dtype
# (spec/rope.md, ROPE-COS-SIN).
TOLERANCES["rope-cos-sin"] = {
    torch.float64: Tolerance(rtol=1.2e-7, atol=2.4e-7),
    torch.float32: Tolerance(rtol=1.2e-7, atol=2.4e-7),
}
TOLERANCES["rope-freq"] = {
    torch.float64: Tolerance(rtol=1e-10, atol=1e-15),
    torch.float32: Tolerance(rtol=1e-5, atol=1e-12),
}


_QUANT = {torch.float16: Tolerance(rtol=1e-3, atol=5e-4), torch.bfloat16: Tolerance(rtol=8e-3, atol=5e-4)}
_W4A16 = {torch.float16: Tolerance(rtol=1e-3, atol=1e-3), torch.bfloat16: Tolerance(rtol=8e-3, atol=8e-3)}
_QUANT_MOE = {torch.float16: Tolerance(rtol=1e-3, atol=1.0), torch.bfloat16: Tolerance(rtol=8e-3, atol=1.0)}
TOLERANCES.update({"quant": _QUANT, "quant-weight-only": _W4A16, "quant-moe": _QUANT_MOE})
TOLERANCES["quant-scale"] = {torch.float32: Tolerance(rtol=2.4e-7, atol=0.0)}


SCALING_RULES = SCALING_RULES + (pair_scale, angle_scale, gemm_scale)
