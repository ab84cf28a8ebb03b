"""Hypothesis strategies for the MoE properties (spec/moe.md).

A ``RoutingRecipe`` gives router logits (and a correction bias) whose selection the contract can
judge (MOE-TIES): each row's logits are a shuffled grid of distinct values (spacing 6 / E, jitter
a quarter of it, so distinct in every tested dtype), and a recipe whose float64 selection gaps at
the k-th and the group boundary fall under ``MARGIN`` float32 tie tolerances, or whose group gaps
would let scores rounded to the logits' dtype reorder the groups, is redrawn from the next seed.
Under a MUST clause only the routing forms released models use are drawn (``model_form``, spec/moe.md
MOE-SELECT): groups with softmax and no bias (group score "max") or sigmoid with a bias ("top2_sum"),
each form with the renormalisation and factor its models' routers take (``model_flags``), and
contiguous tensors; the other combinations and the views are MOE-COMBOS' and MOE-VIEWS' (SHOULD).
fused_moe's inputs are ``conformance.strategies.moe_fused``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from hypothesis import assume
from hypothesis import strategies as st

from conformance.strategies.common import FLOAT_DTYPES, pinned_values, seeds
from reference import moe as oracle

# MOE-TIES: a selection gap must be this many float32 tie tolerances wide to be drawn.
MARGIN = 64
# Ungrouped expert counts (spec/moe.md, Ranges): odd, Step-3.5's 288, Kimi-K2's 384, and past the
# top-k kernels' largest specialisation (512).
EXPERTS = (4, 6, 16, 33, 64, 288, 384, 544)
LOW_PRECISION_EXPERTS = 288  # more distinct logits than that do not fit the grid in bfloat16 (MOE-TIES)
# MOE-TIES' near-ties (spec/moe.md, Ranges): at least twice MARGIN tie tolerances apart.
NEAR_TIE_MARGIN = 2 * MARGIN
NEAR_TIES = (1 / 8, 1 / 32)  # of a bfloat16 ulp: both round to one bfloat16 (and float16 at 1/32)
# MOE-BIAS: the bfloat16 bias's choice must lose this many tie tolerances (scores in the logits' dtype
# included) in some token, so that a router rounding both scores and bias is caught too.
FLIP_MARGIN = 2
# The field's routed scaling factors: DeepSeek-V3 2.5, Hunyuan 2.826, DeepSeek-V2 16.
FACTORS = (1.0, 2.5, 2.826, 16.0)
# Correction biases: small ones, negative ones (MOE-GROUPS: negative selection scores inside the
# kept groups), DeepSeek-V3-like ones near 7 with differences below bfloat16's spacing (MOE-BIAS).
BIAS_KINDS = (None, "small", "negative", "near7")


def tied_group_score(bias) -> str:
    """MOE-GROUPS: the group score the field's routers derive from the bias (vLLM grouped_topk): the
    sum of the two best with a correction bias (DeepSeek-V3), the best without (DeepSeek-V2)."""
    return "max" if bias is None else "top2_sum"


def model_form(scoring: str, bias, num_groups: int, group_score: str) -> bool:
    """MOE-SELECT: a routing form released models use; groups only as DeepSeek-V2 (softmax, no bias)
    and DeepSeek-V3 (sigmoid, a bias) use them, with the group score their bias implies."""
    if num_groups == 1:
        return True
    groupable = (scoring, bias is None) in (("softmax", True), ("sigmoid", False))
    return groupable and group_score == tied_group_score(bias)


def model_flags(scoring: str, bias, num_groups: int, renormalize: bool, factor: float) -> bool:
    """MOE-SELECT: renormalize and routed_scaling_factor as the form's models take them: gpt-oss has no
    factor, DeepSeek-V2's groups never renormalise, a softmax with a bias renormalises without a factor
    (ERNIE 4.5) or takes a factor unrenormalised (LongCat-Flash); the other forms' routers read both."""
    if scoring == "topk_softmax":
        return factor == 1
    if scoring == "softmax" and bias is None and num_groups > 1:
        return not renormalize
    if scoring == "softmax" and bias is not None:
        return not (renormalize and factor != 1)
    return True


def score_rounding(scores: torch.Tensor, *, scoring: str, logits_dtype: torch.dtype) -> torch.Tensor:
    """MOE-TIES: [T, 1], the largest error of a softmax or sigmoid score rounded once to the logits'
    dtype (vLLM's grouped_topk and DeepSeek-V3's reference Gate score in it): half that dtype's spacing
    at the token's largest score; 0 for logits of float32 or wider and for topk_softmax (it chooses by
    the exact logits)."""
    top = scores.detach().to("cpu", torch.float64).abs().amax(dim=-1, keepdim=True)
    eps = torch.finfo(logits_dtype).eps
    if scoring == "topk_softmax" or eps <= torch.finfo(torch.float32).eps:
        return torch.zeros_like(top)
    _, exponent = torch.frexp(top)  # top = m 2^exponent, m in [0.5, 1): spacing eps 2^(exponent - 1)
    return torch.ldexp(torch.full_like(top, eps / 4), exponent)


def spacing(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The distance from |values| to the next larger number of ``dtype`` (its ulp there), float64."""
    _, exponent = torch.frexp(values.detach().double().abs())  # v = m 2^e, m in [0.5, 1)
    return torch.ldexp(torch.full_like(values, torch.finfo(dtype).eps, dtype=torch.float64), exponent - 1)


def tie_tolerance(selection: torch.Tensor, rounding: torch.Tensor | float = 0.0) -> torch.Tensor:
    """MOE-TIES: how far apart two selection scores may be that a correct router still orders either
    way: 8 float32 unit roundoffs of max(1, |sel|), plus twice ``rounding`` (score_rounding: each
    side's score rounded once to the logits' dtype)."""
    return 8 * (torch.finfo(torch.float32).eps / 2) * selection.abs().clamp_min(1.0) + 2 * rounding


@dataclass(frozen=True)
class RoutingRecipe:
    tokens: int
    experts: int
    top_k: int
    scoring: str
    renormalize: bool
    num_groups: int
    topk_group: int
    group_score: str
    routed_scaling_factor: float
    dtype: torch.dtype
    seed: int
    bias: str | None = None
    bias_dtype: torch.dtype = torch.float32
    poison: str | None = None  # MOE-PADDED: "nan", "inf" or "-inf" in rows 0 and tokens - 1
    tie: bool = False  # MOE-TIES: the k-th and (k+1)-th logits made exactly equal
    strided: bool = False
    require_flip: bool = False  # MOE-BIAS: the bias rounded to bfloat16 must change a selection
    # MOE-TIES (spec/moe.md, Ranges): float32 logits without a bias, each row's (k+1)-th selection
    # score this fraction of a bfloat16 ulp below the k-th (at least NEAR_TIE_MARGIN tie tolerances)
    near_tie: float | None = None

    @property
    def options(self) -> dict:
        """select_experts' keywords but the bias."""
        return dict(
            top_k=self.top_k,
            scoring=self.scoring,
            renormalize=self.renormalize,
            num_groups=self.num_groups,
            topk_group=self.topk_group,
            group_score=self.group_score,
            routed_scaling_factor=self.routed_scaling_factor,
        )

    def _draw(self, seed: int):
        gen = torch.Generator().manual_seed(seed)
        # near7: logits close together, so that score gaps are of the bias differences' size (MOE-BIAS)
        step = (0.4 if self.bias == "near7" else 6.0) / self.experts
        grid = torch.stack([torch.randperm(self.experts, generator=gen) for _ in range(self.tokens)]).double()
        jitter = (torch.rand(self.tokens, self.experts, generator=gen, dtype=torch.float64) - 0.5) * step / 2
        logits = ((grid - self.experts / 2) * step + jitter).to(self.dtype)
        bias = None
        if self.bias is not None:
            u = torch.rand(self.experts, generator=gen, dtype=torch.float64)
            # near7: spread 0.04 per 16 experts, so that a model's 128 or 256 still leave judgeable gaps
            spread = 0.04 * max(1.0, self.experts / 16)
            base = {"small": (u - 0.5) * 0.6, "negative": -0.6 - 0.9 * u, "near7": 7.0 + (u - 0.5) * spread}
            bias = base[self.bias].to(self.bias_dtype)
        if self.tie and self.top_k < self.experts:
            order = logits.double().argsort(dim=-1, descending=True)
            rows = torch.arange(self.tokens)
            logits[rows, order[:, self.top_k]] = logits[rows, order[:, self.top_k - 1]]
        elif self.near_tie and bias is None and self.dtype == torch.float32 and self.num_groups == 1:
            logits = self._near_tie(logits) if self.top_k < self.experts else logits
        return logits, bias

    def _near_tie(self, logits):
        """Each row's k-th and (k+1)-th experts given the selection scores v and v - g: v a bfloat16
        number near the k-th score (not a power of two), g ``near_tie`` of its ulp (at least
        NEAR_TIE_MARGIN tie tolerances; spec/moe.md, Ranges), so that both round to v; the winner at
        the higher expert index in even rows and the lower in odd ones, so that a router choosing on
        rounded scores sees a tie and either index order of breaking it loses a row."""
        x, rows, options = logits.double(), torch.arange(self.tokens), dict(scoring=self.scoring)
        sel = oracle.selection_scores(x, **options, correction_bias=None)[1]
        order = sel.argsort(-1, descending=True)
        i, j = order[:, self.top_k - 1], order[:, self.top_k]
        i, j = torch.where((i > j) == (rows % 2 == 0), i, j), torch.where((i > j) == (rows % 2 == 0), j, i)
        value = sel.sort(-1, descending=True).values[:, self.top_k - 1].to(torch.bfloat16).double()
        if self.scoring == "softmax":  # two softmax scores near v need v < 1/2: 7/16 for a dominant top-1
            value = value.clamp_max(0.4375)
        power = torch.frexp(value)[0].abs() == 0.5  # a finer spacing below a power of two
        value = torch.where(power, value - spacing(value, torch.bfloat16) / 2, value)
        gap = spacing(value, torch.bfloat16) * self.near_tie
        gap = gap.clamp_min(NEAR_TIE_MARGIN * float(tie_tolerance(sel).max()))  # _judgeable's tolerance
        if self.scoring == "topk_softmax":
            x[rows, i], x[rows, j] = value, value - gap
            return x.to(self.dtype)
        a, b = value, value - gap
        if self.scoring == "sigmoid":
            fits, top, low = (
                (0 < b) & (a < 1),
                torch.logit(a.clamp(1e-9, 1 - 1e-9)),
                torch.logit(b.clamp(1e-9)),
            )
        else:  # softmax: e^l = s Z with Z = (the others' sum) / (1 - a - b)
            others = x.clone()
            others[rows, i] = others[rows, j] = float("-inf")
            scale = others.logsumexp(-1) - torch.log1p(-(a + b).clamp_max(1 - 1e-9))
            fits, top, low = (0 < b) & (a + b < 1), a.log() + scale, b.clamp_min(1e-300).log() + scale
        x[rows, i] = torch.where(fits, top, x[rows, i])
        x[rows, j] = torch.where(fits, low, x[rows, j])
        return x.to(self.dtype)

    def _judgeable(self, logits, bias) -> bool:
        scores, sel = oracle.selection_scores(logits, scoring=self.scoring, correction_bias=bias)
        tol = float(tie_tolerance(sel).max())
        rounding = score_rounding(scores, scoring=self.scoring, logits_dtype=self.dtype)
        if 1 < self.num_groups and self.topk_group < self.num_groups:
            grouped = sel.view(self.tokens, self.num_groups, -1)
            gs = grouped.amax(-1) if self.group_score == "max" else grouped.topk(2, dim=-1).values.sum(-1)
            top = gs.sort(dim=-1, descending=True).values
            # the kept groups are judged exactly; two groups' top-2 sums of rounded scores reorder within
            # 4 roundings
            gap = (top[:, self.topk_group - 1] - top[:, self.topk_group])[:, None]
            if bool((gap < MARGIN * tol + 4 * rounding).any()):
                return False
        allowed = oracle.allowed_experts(
            sel, num_groups=self.num_groups, topk_group=self.topk_group, group_score=self.group_score
        )
        ranked = sel.masked_fill(~allowed, float("-inf")).sort(dim=-1, descending=True).values
        if not self.tie and self.top_k < int(allowed[0].sum()):
            if bool((ranked[:, self.top_k - 1] - ranked[:, self.top_k] < MARGIN * tol).any()):
                return False
        if self.require_flip:  # MOE-BIAS: the bfloat16 bias's choice fails MOE-TIES by a margin
            _, rounded = oracle.select_experts(
                logits, correction_bias=bias.to(torch.bfloat16), **self.options
            )
            _, exact = oracle.select_experts(logits, correction_bias=bias, **self.options)
            want = sel.gather(1, exact).sort(-1, descending=True).values
            lost = (want - sel.gather(1, rounded).sort(-1, descending=True).values).abs()
            return bool((lost > FLIP_MARGIN * tie_tolerance(want, rounding)).any())
        return True

    def make(self, device="cpu"):
        """(router_logits, correction_bias) on ``device``; the first judgeable seed from ``seed``."""
        for attempt in range(1000):  # a bfloat16 near-7 draw at DeepSeek-V3's shape takes 16 on average
            logits, bias = self._draw(self.seed + (attempt << 20))
            if self._judgeable(logits, bias):
                break
        else:
            raise RuntimeError(f"no judgeable draw for {self}")
        if self.poison is not None:
            logits[0, self.experts // 2] = float(self.poison)
            logits[-1, :: max(1, self.experts // 3)] = float(self.poison)
        logits = logits.to(device)
        if self.strided:
            logits = torch.cat([logits, logits], dim=-1)[:, : self.experts]  # rows 2E apart
            bias = None if bias is None else torch.stack([bias, bias], -1)[:, 0]
        return logits, None if bias is None else bias.to(device)


@st.composite
def routing_recipes(
    draw,
    *,
    scorings=oracle.SCORINGS,
    bias_kinds=BIAS_KINDS,
    grouped=None,
    dtypes=FLOAT_DTYPES,
    factors=FACTORS,
    renormalize=(False, True),
    model_forms=True,
    **fixed,
) -> RoutingRecipe:
    """A routing; with ``model_forms`` (MUST clauses) only the forms released models use (model_form),
    each with the renormalisation and factor its models take (model_flags)."""
    scoring = draw(st.sampled_from(scorings))
    simple = scoring == "topk_softmax"
    bias = None if simple else draw(st.sampled_from(bias_kinds))
    groupable = not simple and (not model_forms or model_form(scoring, bias, 2, tied_group_score(bias)))
    assume(grouped is not True or groupable)
    num_groups = (
        1
        if not groupable or grouped is False
        else draw(st.sampled_from((1, 2, 4, 8) if grouped is None else (2, 4, 8)))
    )
    per_group = draw(st.sampled_from((2, 4, 8)))
    experts = num_groups * per_group if num_groups > 1 else draw(st.sampled_from(EXPERTS))
    topk_group = draw(st.integers(1, num_groups))
    top_k = draw(st.integers(1, min(10, topk_group * (experts // num_groups))))
    dtype = draw(st.sampled_from(dtypes))
    group_score = draw(st.sampled_from(oracle.GROUP_SCORES)) if per_group >= 2 else "max"
    if model_forms and num_groups > 1:
        group_score = tied_group_score(bias)
    flags = {"renormalize": renormalize, "routed_scaling_factor": factors}
    recipe = RoutingRecipe(
        tokens=draw(st.integers(1, 6)),
        experts=experts if dtype == torch.float32 else min(experts, LOW_PRECISION_EXPERTS),
        top_k=top_k,
        scoring=scoring,
        renormalize=renormalize[0] if model_forms else draw(st.sampled_from(renormalize)),
        num_groups=num_groups,
        topk_group=topk_group,
        group_score=group_score,
        routed_scaling_factor=factors[0] if model_forms else draw(st.sampled_from(factors)),
        dtype=dtype,
        seed=draw(seeds(20)),
        bias=bias,
        # MOE-BIAS: every model keeps its bias in float32; a bfloat16 one is MOE-COMBOS'
        bias_dtype=torch.float32 if model_forms else draw(st.sampled_from((torch.float32, torch.bfloat16))),
        near_tie=draw(st.sampled_from(NEAR_TIES)),
    )
    if not model_forms:
        return replace(recipe, **fixed)
    pinned = _model_routing(recipe, scorings, grouped, renormalize)  # a model's own
    recipe = replace(recipe, **{**pinned, **fixed})
    # MOE-SELECT: the renormalisation and factor of the form's models, among the property's choices
    choices = {k: (getattr(recipe, k),) if k in pinned or k in fixed else v for k, v in flags.items()}
    pairs = [(renorm, factor) for renorm in choices["renormalize"]
             for factor in choices["routed_scaling_factor"]
             if model_flags(recipe.scoring, recipe.bias, recipe.num_groups, renorm, factor)]  # fmt: skip
    assume(pairs)
    renorm, factor = draw(st.sampled_from(pairs))
    return replace(recipe, renormalize=renorm, routed_scaling_factor=factor)


def _model_routing(recipe, scorings, grouped, renormalize) -> dict:
    """MODEL-RUN: the model's routing (experts, top_k, groups, scoring, renormalisation) where the
    property's constraints admit it, else nothing (the generic draw stays); a grouped model keeps its
    form (model_form: DeepSeek-V2 without a bias, DeepSeek-V3 with one)."""
    for experts, top_k, groups, kept, scoring, renorm in pinned_values("moe.routing") or ():
        if scoring in scorings and renorm in renormalize and grouped in (None, groups > 1):
            bias = recipe.bias if scoring != "topk_softmax" else None  # the property's bias kinds
            if groups > 1:
                bias = None if scoring == "softmax" else recipe.bias or "small"
            return {"experts": experts, "top_k": top_k, "num_groups": groups, "topk_group": kept,
                    "scoring": scoring, "renormalize": renorm, "bias": bias,
                    "group_score": tied_group_score(bias)}  # fmt: skip
    return {}
