"""The MoE mutants of the shared-expert slots and the fused expert computation (spec/moe.md),
collected into mutants/moe.py's batch."""

from __future__ import annotations

import torch

from backends import native_moe as nm
from backends.native import NativeBackend


class SharedExpertInverseWeight(NativeBackend):
    """The shared expert's slot weighs 1/rsf also when the factor sits in the routed weights.

    Origin: sglang#28237 (AMD aiter + DeepEP: shared expert weighted 1/rsf, about 0.4).
    Caught by: MOE-SHARED.
    """

    name = "moe-shared-expert-inverse-weight"
    clauses = {"MOE-SHARED"}

    def append_shared_experts(
        self, topk_weights, topk_ids, *, shared_ids, rsf_on_output, routed_scaling_factor
    ):
        return super().append_shared_experts(
            topk_weights,
            topk_ids,
            shared_ids=shared_ids,
            rsf_on_output=True,
            routed_scaling_factor=routed_scaling_factor,
        )


class SharedSlotReplacesRouted(NativeBackend):
    """The shared expert is written over the last routed slot instead of appended.

    Origin: sglang#38963 (the fused shared-expert slot replaced by a 7th routed expert, and back).
    Caught by: MOE-SHARED.
    """

    name = "moe-shared-slot-replaces-routed"
    clauses = {"MOE-SHARED"}

    def append_shared_experts(
        self, topk_weights, topk_ids, *, shared_ids, rsf_on_output, routed_scaling_factor
    ):
        w, i = super().append_shared_experts(
            topk_weights,
            topk_ids,
            shared_ids=shared_ids,
            rsf_on_output=rsf_on_output,
            routed_scaling_factor=routed_scaling_factor,
        )
        k = topk_ids.shape[1]
        keep = [*range(k - 1), *range(k, w.shape[1])]
        return w[:, keep], i[:, keep]


def _fused_with(activation_fn):
    def fused_moe(
        self,
        x,
        w13,
        w2,
        topk_weights,
        topk_ids,
        *,
        activation,
        limit,
        apply_router_weight_on_input,
        output_scale,
    ):
        original = nm.activation32
        nm.activation32 = activation_fn
        try:
            return nm.fused_moe(
                x,
                w13,
                w2,
                topk_weights,
                topk_ids,
                activation=activation,
                limit=limit,
                apply_router_weight_on_input=apply_router_weight_on_input,
                output_scale=output_scale,
            )
        finally:
            nm.activation32 = original

    return fused_moe


_ACTIVATION = nm.activation32


class ClampMissingInFused(NativeBackend):
    """The expert computation ignores the layer's limit: no clamp inside the MoE runner.

    Origin: the Step-3.5-Flash port, whose missing clamp lived in the MoE runner (gemm1_clamp_limit).
    Caught by: MOE-CLAMP, MOE-FUSED.
    """

    name = "moe-clamp-missing-in-fused"
    clauses = {"MOE-CLAMP", "MOE-FUSED"}
    fused_moe = _fused_with(lambda h, activation, limit: _ACTIVATION(h, activation, None))


def _wrong_half(h, activation, limit):
    if activation != "swiglustep" or limit is None:
        return _ACTIVATION(h, activation, limit)
    gate, up = h.float().chunk(2, dim=-1)
    return torch.nn.functional.silu(gate).clamp(-limit, limit) * up.clamp(max=limit)


class ClampOnWrongHalf(NativeBackend):
    """The SwiGLU-step clamps swapped between the halves: the gate both ways, up only from above.

    Origin: gate/up swapped in a fused gemm1 epilogue (the halves' order differs between kernels).
    Caught by: MOE-CLAMP, MOE-FUSED.
    """

    name = "moe-clamp-on-wrong-half"
    clauses = {"MOE-CLAMP", "MOE-FUSED"}
    fused_moe = _fused_with(_wrong_half)


def _clamp_before_silu(h, activation, limit):
    if activation != "swiglustep" or limit is None:
        return _ACTIVATION(h, activation, limit)
    return _ACTIVATION(h, "silu", limit)


class StepClampBeforeSilu(NativeBackend):
    """Step-3.5's limit applied as vLLM's "silu" clamp: the gate clamped before the SiLU, not after.

    Origin: a port handing Step-3.5's per-layer swiglu_limit to vLLM's fused MoE as swiglu_limit with
    activation "silu" (apply_moe_activation: silu_and_mul_with_clamp) instead of "swiglustep".
    Caught by: MOE-CLAMP, MOE-FUSED.
    """

    name = "moe-step-clamp-before-silu"
    clauses = {"MOE-CLAMP", "MOE-FUSED"}
    fused_moe = _fused_with(_clamp_before_silu)


class RouterWeightTwice(NativeBackend):
    """With the router weight applied on the input, it is applied on the output as well.

    Origin: apply_router_weight_on_input honoured by the dispatch but the combine still weighting.
    Caught by: MOE-FUSED.
    """

    name = "moe-router-weight-twice"
    clauses = {"MOE-FUSED"}

    def fused_moe(
        self,
        x,
        w13,
        w2,
        topk_weights,
        topk_ids,
        *,
        activation,
        limit,
        apply_router_weight_on_input,
        output_scale,
    ):
        if not apply_router_weight_on_input:
            return super().fused_moe(
                x,
                w13,
                w2,
                topk_weights,
                topk_ids,
                activation=activation,
                limit=limit,
                apply_router_weight_on_input=False,
                output_scale=output_scale,
            )
        scaled = (x.float()[:, None, :] * topk_weights.float()[..., None]).to(x.dtype)
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for j in range(topk_ids.shape[1]):
            out += (
                super()
                .fused_moe(
                    scaled[:, j],
                    w13,
                    w2,
                    topk_weights[:, j : j + 1],
                    topk_ids[:, j : j + 1],
                    activation=activation,
                    limit=limit,
                    apply_router_weight_on_input=False,
                    output_scale=output_scale,
                )
                .float()
            )
        return out.to(x.dtype)


FUSED_MUTANTS = [
    SharedExpertInverseWeight(), SharedSlotReplacesRouted(), ClampMissingInFused(), ClampOnWrongHalf(),
    StepClampBeforeSilu(), RouterWeightTwice(),
]  # fmt: skip
