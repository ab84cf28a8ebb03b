"""MoE mutants wrong only in a region the draws or checks once never reached (spec/moe.md, Ranges;
listed by ``mutants/moe.py``): float32 near-ties closer than a bfloat16 ulp, fused_moe past its first
64-token tile, and shared-expert ids of another dtype. Each conformed while every selection gap stayed
64 tie tolerances wide, fused calls had at most 8 tokens, and MOE-SHARED compared ids as int64; each
docstring says the bug, its origin and the clauses that catch it.
"""

from __future__ import annotations

import torch

from backends import native_moe as nm
from backends.native import NativeBackend
from reference import moe as _moe

TILE = 64  # FusedSecondTileWeights' token tile (vLLM's BLOCK_SIZE_M)


class SelectOnBfloat16Scores(NativeBackend):
    """The experts are chosen on the scores rounded to bfloat16 (a bfloat16 top-k buffer), the weights
    gathered from the float32 scores: right for bfloat16 logits (the field's convention, MOE-TIES),
    wrong for float32 logits whose k-th and (k+1)-th scores lie within a bfloat16 ulp.

    Origin: the issue's held-out router: a port of DeepSeek-V3's reference Gate (scores in the
    logits' dtype, bfloat16 there) that keeps a bfloat16 score buffer whatever the logits' dtype.
    Caught by: MOE-SELECT, MOE-SCORING, MOE-TIES.
    """

    name = "moe-select-on-bfloat16-scores"
    clauses = {"MOE-SELECT", "MOE-SCORING", "MOE-TIES"}

    def select_experts(self, router_logits, *, top_k, scoring, renormalize, correction_bias, num_groups,
                       topk_group, group_score, routed_scaling_factor):  # fmt: skip
        _moe.validate_routing_args(router_logits, top_k, scoring, renormalize, correction_bias, num_groups,
                                   topk_group, group_score, routed_scaling_factor)  # fmt: skip
        scores = nm.scores32(router_logits, scoring)
        selection = scores.to(torch.bfloat16).float()
        if correction_bias is not None:
            selection = selection + correction_bias.float()
        if num_groups > 1:
            allowed = nm.group_mask(selection, num_groups, topk_group, group_score)
            selection = selection.masked_fill(~allowed, float("-inf"))
        ids = selection.topk(top_k, dim=-1).indices
        return nm.weights_of(scores, ids, scoring, renormalize, routed_scaling_factor).float(), ids


class FusedSecondTileWeights(NativeBackend):
    """Tokens past the first 64-token tile are weighted with the routing weights of the token 64 rows
    earlier (the tile's weight pointer never advanced): right for up to 64 tokens.

    Origin: tiled fused-MoE kernels (vLLM's Triton fused_moe, BLOCK_SIZE_M 16 to 64) whose per-tile
    offset is wrong; a serving batch passes 64 tokens at prefill.
    Caught by: MOE-FUSED, MOE-CLAMP.
    """

    name = "moe-fused-second-tile-weights"
    clauses = {"MOE-FUSED", "MOE-CLAMP"}

    def fused_moe(self, x, w13, w2, topk_weights, topk_ids, *, activation, limit,
                  apply_router_weight_on_input, output_scale):  # fmt: skip
        rows = torch.arange(topk_weights.shape[0], device=topk_weights.device) % TILE
        return nm.fused_moe(x, w13, w2, topk_weights[rows], topk_ids, activation=activation, limit=limit,
                            apply_router_weight_on_input=apply_router_weight_on_input,
                            output_scale=output_scale)  # fmt: skip


class SharedIdsPromoted(NativeBackend):
    """The shared slots' ids are built as an int64 tensor and concatenated to int32 routed ids, so the
    ids come back int64 (``torch.cat`` promotes): the values right, the dtype the expert dispatch
    reads as int32 wrong.

    Origin: ``torch.tensor(shared_ids)`` (int64 by default) beside vLLM's int32 top-k ids; the check
    compared the ids as ``.long()`` and never saw it (rule 3: no comparison discards a named dtype).
    Caught by: MOE-SHARED.
    """

    name = "moe-shared-ids-promoted"
    clauses = {"MOE-SHARED"}

    def append_shared_experts(self, topk_weights, topk_ids, *, shared_ids, rsf_on_output,
                              routed_scaling_factor):  # fmt: skip
        w, i = nm.append_shared_experts(topk_weights, topk_ids, shared_ids=shared_ids,
                                        rsf_on_output=rsf_on_output,
                                        routed_scaling_factor=routed_scaling_factor)  # fmt: skip
        return w, i.long()


BACKENDS = [SelectOnBfloat16Scores(), FusedSecondTileWeights(), SharedIdsPromoted()]
