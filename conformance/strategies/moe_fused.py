"""Hypothesis strategies for fused_moe (spec/moe.md, MOE-FUSED, MOE-CLAMP): a ``FusedRecipe`` gives
its inputs; under a MUST clause the expert forms models run (``fused_model_form``), and the sizes
reach past the fused kernels' tiles one region at a time (``REGIONS``, spec/moe.md Ranges).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from hypothesis import strategies as st

from conformance.strategies import model_pins
from conformance.strategies.common import FLOAT_DTYPES, seeds
from reference import moe as oracle


@dataclass(frozen=True)
class FusedRecipe:
    tokens: int
    hidden: int
    inter: int
    experts: int
    top_k: int
    activation: str
    limit: float | None
    on_input: bool
    output_scale: float
    dtype: torch.dtype
    seed: int
    x_scale: float = 1.0
    ids_dtype: torch.dtype = torch.int64
    strided: bool = False
    weights_dtype: torch.dtype = torch.float32

    @property
    def options(self) -> dict:
        return dict(
            activation=self.activation,
            limit=self.limit,
            apply_router_weight_on_input=self.on_input,
            output_scale=self.output_scale,
        )

    def make(self, device="cpu"):
        """(x, w13, w2, topk_weights float32, topk_ids) with distinct ids per token."""
        gen = torch.Generator().manual_seed(self.seed)
        x = torch.randn(self.tokens, self.hidden, generator=gen, dtype=torch.float64) * self.x_scale
        w13 = torch.randn(self.experts, 2 * self.inter, self.hidden, generator=gen, dtype=torch.float64)
        w2 = torch.randn(self.experts, self.hidden, self.inter, generator=gen, dtype=torch.float64)
        w13, w2 = w13 / self.hidden**0.5, w2 / self.inter**0.5
        weights = (torch.rand(self.tokens, self.top_k, generator=gen) + 0.05).to(self.weights_dtype)
        ids = torch.stack(
            [torch.randperm(self.experts, generator=gen)[: self.top_k] for _ in range(self.tokens)]
        )
        x, w13, w2 = (t.to(self.dtype).to(device) for t in (x, w13, w2))
        weights, ids = weights.to(device), ids.to(device, self.ids_dtype)
        if (
            self.strided
        ):  # every tensor a view: rows of x and the routing twice as far apart, w13/w2 transposed
            x, weights, ids = (torch.cat([t, t], dim=-1)[:, : t.shape[1]] for t in (x, weights, ids))
            w13, w2 = (w.transpose(1, 2).contiguous().transpose(1, 2) for w in (w13, w2))
        return x, w13, w2, weights, ids


def fused_model_form(recipe: FusedRecipe) -> bool:
    """MOE-FUSED: an expert computation released models run: the router weight on the input as Llama-4
    runs it (SwiGLU without a limit, one expert per token, no output scale; vLLM asserts top-k 1 there),
    gpt-oss's SwiGLU with its limit, an output scale only with SwiGLU or the SwiGLU-step (Step-3.5's
    block; gpt-oss's and DeepSeek-V4's experts have none)."""
    swiglu = recipe.activation in ("silu", "swiglustep") and recipe.limit is None
    if recipe.on_input:
        return swiglu and recipe.top_k == 1 and recipe.output_scale == 1
    if recipe.activation == "swiglu_oai" and recipe.limit is None:
        return False
    return recipe.output_scale == 1 or swiglu or recipe.activation == "swiglustep"


# spec/moe.md, Ranges: small sizes, or one region past the fused kernels' tiles at small other sizes:
# "long": 65 to 72 tokens (past vLLM's BLOCK_SIZE_M 64); "deep": hidden sizes 136 and 137 (past a
# 128-wide K/N tile, one odd) and 65 to 72 experts; "wide": Qwen3-MoE's and DeepSeek-V2-Lite's
# intermediate sizes 768 and 1408. Big regions have at most 2 tokens (but "long").
REGIONS = ("small", "long", "deep", "wide")


@st.composite
def _region(draw, recipe: FusedRecipe) -> FusedRecipe:
    """``recipe`` (small sizes) in a drawn region: drawn after the recipe, so that its draws stay."""
    region = draw(st.sampled_from(REGIONS))
    if region == "long":
        return replace(recipe, tokens=draw(st.integers(65, 72)))
    if region == "deep":
        experts = draw(st.integers(65, 72))
        return replace(
            recipe, tokens=min(recipe.tokens, 2), hidden=draw(st.sampled_from((136, 137))), experts=experts
        )
    if region == "wide":
        return replace(recipe, tokens=min(recipe.tokens, 2), inter=draw(st.sampled_from((768, 1408))))
    return recipe


@st.composite
def fused_recipes(
    draw, *, limits=(None, 0.5, 1.0, 3.0), dtypes=FLOAT_DTYPES, model_forms=True, **fixed
) -> FusedRecipe:
    """fused_moe's inputs; with ``model_forms`` (MUST clauses) only fused_model_form's."""
    model_activation = model_forms and None in limits  # MODEL-RUN: a model's activation (model_pins.experts)
    experts = draw(st.integers(1, 6))
    on_input = draw(st.booleans()) if not model_forms or None in limits else False
    swiglu = model_forms and on_input  # Llama-4's SwiGLU, without a limit
    activation = draw(st.sampled_from(("silu", "swiglustep") if swiglu else oracle.ACTIVATIONS))
    if swiglu:
        limits = (None,)
    elif model_forms and activation == "swiglu_oai":
        limits = tuple(limit for limit in limits if limit is not None) or (7.0,)
    limit = draw(st.sampled_from(limits))
    recipe = FusedRecipe(
        tokens=draw(st.integers(1, 8)),
        hidden=draw(st.sampled_from((8, 16, 24))),
        inter=draw(st.sampled_from((4, 8, 12))),
        experts=experts,
        top_k=1 if model_forms and on_input else draw(st.integers(1, min(3, experts))),
        activation=activation,
        limit=limit,
        on_input=on_input,
        output_scale=draw(st.sampled_from((1.0, 2.5))),
        dtype=draw(st.sampled_from(dtypes)),
        seed=draw(seeds(20)),
        x_scale=draw(st.sampled_from((1.0, 3.0))),
        ids_dtype=draw(st.sampled_from((torch.int64, torch.int32))),
        weights_dtype=draw(st.sampled_from((torch.float32, torch.float32, torch.bfloat16))),
    )
    recipe = draw(_region(recipe))  # drawn last: the draws above are unchanged
    # MODEL-RUN: a model's expert count, top-k and scaled sizes replace the drawn ones (none otherwise).
    recipe = replace(model_pins.experts(draw, recipe, model_activation), **fixed)
    return recipe if not model_forms or fused_model_form(recipe) else replace(recipe, output_scale=1.0)
