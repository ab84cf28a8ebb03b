"""MoE mutants: the field's routing and expert-computation bugs (spec/moe.md, Sources) and their
neighbours, each one realistic bug in an otherwise correct native backend or Ascend adapter.
"""

from __future__ import annotations

import torch

from backends import native_moe as nm
from backends.native import NativeBackend
from mutants._moe_fused import FUSED_MUTANTS
from mutants._moe_npu import NPU_MUTANTS
from mutants._moe_ranges import BACKENDS as RANGE_MUTANTS
from reference import moe as _moe

PROPERTIES = ["conformance.test_moe", "conformance.test_moe_forms"]


def _select(
    logits,
    *,
    top_k,
    scoring,
    renormalize,
    correction_bias,
    num_groups,
    topk_group,
    group_score,
    routed_scaling_factor,
    bias_dtype=None,
    fill=float("-inf"),
    group_by=None,
    weights_from="scores",
    renorm=None,
    after=None,
    scores_as=None,
):
    """native_moe.select_experts with one step swappable (the mutants' knobs)."""
    _moe.validate_routing_args(
        logits,
        top_k,
        scoring,
        renormalize,
        correction_bias,
        num_groups,
        topk_group,
        group_score,
        routed_scaling_factor,
    )
    scores = nm.scores32(logits, scores_as or scoring)
    selection = scores
    if correction_bias is not None:
        selection = scores + correction_bias.to(bias_dtype or torch.float32).float()
    if num_groups > 1:
        allowed = nm.group_mask(selection, num_groups, topk_group, group_by or group_score)
        selection = selection.masked_fill(~allowed, fill)
    ids = selection.topk(top_k, dim=-1).indices
    source = selection if weights_from == "selection" else scores
    renorm = renormalize if renorm is None else renorm
    weights = nm.weights_of(source, ids, scores_as or scoring, renorm, routed_scaling_factor)
    return (weights if after is None else after(weights, renormalize, routed_scaling_factor)).float(), ids


class _Routing(NativeBackend):
    knobs: dict = {}

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
        return _select(
            router_logits,
            top_k=top_k,
            scoring=scoring,
            renormalize=renormalize,
            correction_bias=correction_bias,
            num_groups=num_groups,
            topk_group=topk_group,
            group_score=group_score,
            routed_scaling_factor=routed_scaling_factor,
            **self.knobs,
        )


class RsfDroppedWithRenorm(_Routing):
    """With renormalisation on, the routed scaling factor is never applied.

    Origin: sglang#29909, the NPU top-k (`fused_topk_npu`) dropped routed_scaling_factor 2.826
    after renormalising (GPQA-Diamond 0.175 against 87.2).
    Caught by: MOE-RENORM, MOE-SELECT, MOE-RSF-ONCE.
    """

    name = "moe-rsf-dropped-with-renorm"
    clauses = {"MOE-RENORM", "MOE-SELECT", "MOE-RSF-ONCE"}
    knobs = {"after": lambda w, renorm, rsf: w / rsf if renorm else w}


class SoftmaxForSigmoid(_Routing):
    """Softmax scores whatever ``scoring`` says: the scoring function is never passed to the kernel.

    Origin: sglang#29042, #29493 (DeepSeek-V2-Coder, MiMo-V2 routed with softmax on NPU).
    Caught by: MOE-SCORING, MOE-SELECT.
    """

    name = "moe-softmax-for-sigmoid"
    clauses = {"MOE-SCORING", "MOE-SELECT"}
    knobs = {"scores_as": None}

    def select_experts(self, router_logits, *, scoring, **options):
        chosen = "softmax" if scoring == "sigmoid" else scoring
        return super().select_experts(router_logits, scoring=chosen, **options)


class BiasRoundedToLogitsDtype(_Routing):
    """The float32 correction bias is cast to the logits' dtype before it is added.

    Origin: sglang#37133 (AMD): a bias near 7 cast to bf16, 238 distinct values became 8, 98.5% of
    tokens picked other experts.
    Caught by: MOE-BIAS.
    """

    name = "moe-bias-rounded-to-logits-dtype"
    clauses = {"MOE-BIAS"}

    def select_experts(self, router_logits, **options):
        return _select(router_logits, bias_dtype=router_logits.dtype, **options)


class RsfAppliedTwice(_Routing):
    """The routed scaling factor multiplies the weights twice (kernel and wrapper).

    Origin: vllm#24119 (regression from #23123), vllm#45037: DeepSeek-R1 GSM8K 0.52, 0.95 once fixed.
    Caught by: MOE-SELECT, MOE-RENORM, MOE-RSF-ONCE.
    """

    name = "moe-rsf-applied-twice"
    clauses = {"MOE-SELECT", "MOE-RENORM", "MOE-RSF-ONCE"}
    knobs = {"after": lambda w, renorm, rsf: w * rsf}


class MaskedGroupsZero(_Routing):
    """The experts of the excluded groups are filled with 0 instead of -inf.

    Origin: vllm#13474, sglang#3705: with negative in-group scores, experts outside the kept groups won.
    Caught by: MOE-GROUPS.
    """

    name = "moe-masked-groups-zero"
    clauses = {"MOE-GROUPS"}
    knobs = {"fill": 0.0}


class GroupScoreMaxForTop2(_Routing):
    """Groups scored by their max where the sum of their top two is configured.

    Origin: DeepSeek-V2's group_limited_greedy code reused for V3's noaux_tc.
    Caught by: MOE-GROUPS, MOE-SELECT.
    """

    name = "moe-group-score-max-for-top2"
    clauses = {"MOE-GROUPS", "MOE-SELECT"}
    knobs = {"group_by": "max"}


class WeightsFromBiasedScore(_Routing):
    """The weights are gathered from the biased selection score instead of the unbiased score.

    Origin: a port gathering from ``scores_for_choice`` (the tensor the top-k ran on).
    Caught by: MOE-SELECT, MOE-BIAS, MOE-GROUPS.
    """

    name = "moe-weights-from-biased-score"
    clauses = {"MOE-SELECT", "MOE-BIAS", "MOE-GROUPS"}
    knobs = {"weights_from": "selection"}


class RenormSkipped(_Routing):
    """``renormalize=True`` is ignored: the raw top-k scores are returned.

    Origin: a kernel flag (norm_topk_prob) not forwarded.
    Caught by: MOE-RENORM, MOE-SELECT.
    """

    name = "moe-renorm-skipped"
    clauses = {"MOE-RENORM", "MOE-SELECT"}
    knobs = {"renorm": False}


class RenormAlways(_Routing):
    """The weights are always renormalised, also when ``renormalize=False``.

    Origin: a golden that renormalises whenever the scoring is sigmoid (the vLLM-Ascend golden
    pattern), or a top-k-softmax kernel used for every model.
    Caught by: MOE-RENORM, MOE-SCORING, MOE-SELECT.
    """

    name = "moe-renorm-always"
    clauses = {"MOE-RENORM", "MOE-SCORING", "MOE-SELECT"}
    knobs = {"renorm": True}


class TopkSoftmaxForSoftmax(_Routing):
    """Softmax-then-top-k models routed as top-k-then-softmax (the gpt-oss/Mixtral kernel).

    Origin: one fused top-k-softmax kernel for every softmax model; without renormalisation the
    weights should be the full-softmax probabilities.
    Caught by: MOE-SCORING, MOE-SELECT, MOE-RENORM.
    """

    name = "moe-topk-softmax-for-softmax"
    clauses = {"MOE-SCORING", "MOE-SELECT", "MOE-RENORM"}

    def select_experts(self, router_logits, *, scoring, **options):
        return super().select_experts(
            router_logits, scoring="topk_softmax" if scoring == "softmax" else scoring, **options
        )


class RenormHugeWeights(_Routing):
    """Renormalisation divides by a near-zero sum taken from the wrong buffer: weights near 1e9, ids right.

    Origin: flagos-ai/FlagGems#5123 (Ascend fused topk_softmax with renormalize=True gave weights
    near 3e9; the exact cause is not public).
    Caught by: MOE-RENORM, MOE-SELECT.
    """

    name = "moe-renorm-huge-weights"
    clauses = {"MOE-RENORM", "MOE-SELECT"}
    knobs = {"after": lambda w, renorm, rsf: w * 3e9 if renorm else w}


class _PaddedRows(_Routing):
    """The native routing with the padded rows' (NaN/Inf logits) result replaced by ``_padded``."""

    def select_experts(self, router_logits, **options):
        weights, ids = super().select_experts(router_logits, **options)
        bad = ~torch.isfinite(router_logits).all(dim=-1)
        return self._padded(bad[:, None], weights, ids)


class PaddedRowsDuplicateIds(_PaddedRows):
    """Padded rows (NaN/Inf logits) get NaN weights and expert 0 in every slot: duplicate ids.

    Origin: vLLM's topk_softmax CUDA kernel before its NaN/Inf clamp: NaN scores made the argmax loop
    pick expert 0 for every slot ("NaN > NaN" is false), duplicate ids that crash the MoE sort kernels
    (the regression in vLLM's tests/kernels/moe/test_fused_topk.py).
    Caught by: MOE-PADDED.
    """

    name = "moe-padded-rows-duplicate-ids"
    clauses = {"MOE-PADDED"}

    def _padded(self, bad, weights, ids):
        return weights.masked_fill(bad, float("nan")), ids.masked_fill(bad, 0)


class PaddedRowsNaN(_PaddedRows):
    """Padded rows (NaN/Inf logits) get NaN weights, their ids valid and distinct.

    Origin: what every torch router of the field does (transformers', vLLM's CPU and torch ones);
    vLLM's CUDA top-k kernel clamps NaN/Inf scores to 0 and gives finite weights.
    Caught by: MOE-PADDED-FINITE (SHOULD: the field's torch routers give NaN there).
    """

    name = "moe-padded-rows-nan"
    clauses = {"MOE-PADDED-FINITE"}
    # A robustness mistake only a SHOULD clause sees (spec/README.md, Levels).
    level = "SHOULD"
    why = "transformers' routers and vLLM's torch and CPU routers give a padded row NaN weights"

    def _padded(self, bad, weights, ids):
        return weights.masked_fill(bad, float("nan")), ids


BACKENDS = [
    RsfDroppedWithRenorm(), SoftmaxForSigmoid(), BiasRoundedToLogitsDtype(), RsfAppliedTwice(),
    MaskedGroupsZero(), GroupScoreMaxForTop2(), WeightsFromBiasedScore(), RenormSkipped(), RenormAlways(),
    TopkSoftmaxForSoftmax(), RenormHugeWeights(), PaddedRowsDuplicateIds(), PaddedRowsNaN(), *FUSED_MUTANTS,
    *NPU_MUTANTS, *RANGE_MUTANTS,
]  # fmt: skip
