"""The Ascend adapter's MoE ops (spec/moe.md; spec/ascend.md, CANN-MOE-GATING-TOPK,
CANN-MOE-GATING-TOPK-SOFTMAX), installed on ``backends.npu.AscendBackend`` by ``install``.

Routing: softmax models without groups or bias, and top-k-then-softmax models, go through
``npu_moe_gating_top_k_softmax`` (not renormalised: the adapter renormalises and applies the
factor); every other model through ``npu_moe_gating_top_k`` with norm_type, groups, renorm and
the factor passed explicitly (the factor only there). The bias dtype must equal the logits', so
the logits go in as float32 (exact) with the float32 bias, never the bias rounded down. A sigmoid
model without renormalisation takes the kernel's ids and forms its weights from the scores,
since the kernel normalises sigmoid weights (inferred). The expert computation expands the
tokens k-major (row j * T + t for slot j of token t) and reads them back through that row index.
"""

from __future__ import annotations

import torch

from backends import NotImplementedOp
from backends import native_moe as nm
from reference import moe as _moe

__all__ = ["AscendMoeOps", "install"]


def _finite_float32(router_logits: torch.Tensor) -> torch.Tensor:
    """float32 logits, a padded row (NaN/Inf) read as zeros (MOE-PADDED: the kernels' NaN handling
    is not documented)."""
    x = router_logits.float()
    return torch.where(torch.isfinite(x).all(dim=-1, keepdim=True), x, torch.zeros_like(x))


class AscendMoeOps:
    def npu_gating_args(
        self, *, top_k, scoring, renormalize, num_groups, topk_group, group_score, routed_scaling_factor
    ) -> dict:
        """The keyword arguments of npu_moe_gating_top_k for one routing (the whole mapping)."""
        return dict(
            k=top_k,
            k_group=topk_group,
            group_count=num_groups,
            group_select_mode=0 if group_score == "max" else 1,
            renorm=int(renormalize),
            norm_type=0 if scoring == "softmax" else 1,
            out_flag=False,
            routed_scaling_factor=float(routed_scaling_factor),
            eps=1e-20,
        )

    def gating_bias(self, correction_bias, x):
        """MOE-BIAS: the bias in float32 with float32 logits (the kernel wants equal dtypes)."""
        return None if correction_bias is None else correction_bias.to(x.dtype)

    def select_experts(
        self,
        router_logits,
        *,
        top_k,
        scoring,
        renormalize,
        correction_bias,
        num_groups,
        topk_group,
        group_score,
        routed_scaling_factor,
    ):
        _moe.validate_routing_args(
            router_logits,
            top_k,
            scoring,
            renormalize,
            correction_bias,
            num_groups,
            topk_group,
            group_score,
            routed_scaling_factor,
        )
        x = _finite_float32(router_logits)
        plain_softmax = scoring == "softmax" and num_groups == 1 and correction_bias is None
        if scoring == "topk_softmax" or plain_softmax:
            y, ids, _ = self.ops.npu_moe_gating_top_k_softmax(x, None, k=top_k)
            if scoring == "topk_softmax" or renormalize:
                y = y / y.sum(dim=-1, keepdim=True)
            return (y * routed_scaling_factor).float(), ids.long()
        args = self.npu_gating_args(
            top_k=top_k,
            scoring=scoring,
            renormalize=renormalize,
            num_groups=num_groups,
            topk_group=topk_group,
            group_score=group_score,
            routed_scaling_factor=routed_scaling_factor,
        )
        k = args.pop("k")
        y, ids, _ = self.ops.npu_moe_gating_top_k(x, k, bias=self.gating_bias(correction_bias, x), **args)
        ids = ids.long()
        if scoring == "sigmoid" and not renormalize:  # the kernel normalises sigmoid weights
            y = torch.sigmoid(x).gather(1, ids) * routed_scaling_factor
        return y.float(), ids

    append_shared_experts = staticmethod(nm.append_shared_experts)
    moe_router_config = NotImplementedOp("config parsing is the serving framework's, not the kernel's")

    def row_index(self, tokens: int, k: int, device) -> torch.Tensor:
        """CANN-MOE-GATING-TOPK-SOFTMAX's row_idx: slot j of token t is expanded row j * T + t."""
        return torch.arange(tokens * k, device=device).reshape(k, tokens).t()

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
        """MOE-FUSED over the k-major expanded rows (the npu_moe_init_routing order): each row through
        its expert, then each token's k rows gathered by row index, weighted and summed."""
        limit = _moe.validate_fused_args(
            x, w13, w2, topk_weights, topk_ids, activation, limit, apply_router_weight_on_input, output_scale
        )
        tokens, k = topk_ids.shape
        row_ids = topk_ids.t().reshape(-1).long()  # k-major, as the rows are expanded
        row_weights = topk_weights.float().t().reshape(-1, 1)
        rows = x.repeat(k, 1)
        if apply_router_weight_on_input:
            rows = (rows.float() * row_weights).to(x.dtype)
        y = torch.zeros(tokens * k, x.shape[1], dtype=torch.float32, device=x.device)
        for expert in torch.unique(row_ids).tolist():
            r = torch.nonzero(row_ids == expert).flatten()
            h = nm.activation32(rows[r] @ w13[expert].T, activation, limit).to(x.dtype)
            y[r] = (h @ w2[expert].T).float()
        per_slot = y[self.row_index(tokens, k, x.device)]  # [T, k, H]
        if not apply_router_weight_on_input:
            per_slot = per_slot * topk_weights.float()[..., None]
        return (per_slot.sum(dim=1) * output_scale).to(x.dtype)


OPS = ("select_experts", "append_shared_experts", "fused_moe", "moe_router_config")
HELPERS = ("npu_gating_args", "gating_bias", "row_index")


def install(cls) -> None:
    """Give the adapter class the MoE ops and their helpers (a block of its own in backends/npu.py)."""
    for name in (*OPS, *HELPERS):
        setattr(cls, name, AscendMoeOps.__dict__[name])
