"""Hypothesis strategies for the w8a8 expert path (spec/quant.md, QUANT-MOE-W8A8).

A recipe draws sizes, dtypes, a seed and a feature; ``make(device)`` builds ``(x, w13, w2,
topk_weights, topk_ids, w13_scale, w2_scale)`` with the same values every time. The draws make the
clauses' mistakes visible: every expert's scales carry their own power of two (a neighbour's
scale is off by 2x to 8x), adjacent tokens 2x to 8x apart in magnitude (2^-3..1, their activations
2^-6..1: one scale for all rows flattens the small ones), and with ``feature="split"`` the up
projection's channel scales are 2^-6 of the gate's (gate 8x, up / 8: a row quantized before the
gate rounds the up values away).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from conformance.strategies.common import seeds

# (T, H, I, E, k): one token, odd token counts, k = 1 / 2 / 4, H past 64, I a multiple of 64 (the
# Ascend fused op's rule; npu-emulated's adapter sends others to native: I = 32 does); small: the
# float64 oracle loops over experts, and a row's quantization does not depend on H beyond its amax.
MOE_SHAPES = ((1, 32, 64, 4, 1), (6, 64, 64, 8, 2), (13, 48, 32, 4, 2), (4, 96, 128, 8, 4))
# Several tokens an expert (QUANT-MOE-W8A8-REQUANT: a per-expert scale differs from per-row ones).
MANY_TOKENS = ((13, 48, 64, 4, 2), (24, 32, 32, 4, 2))


@dataclass(frozen=True)
class W8a8MoeRecipe:
    shape: tuple
    dtype: torch.dtype
    seed: int
    feature: str = "plain"  # or "split"
    scale_rank3: bool = False  # compressed-tensors' [E, C, 1] channel scales
    ids_int32: bool = False  # vLLM's int32 ids; transformers' int64
    weights_in_x_dtype: bool = False

    def make(self, device="cpu"):
        gen = torch.Generator().manual_seed(self.seed)
        t, h, i, e, k = self.shape
        x = torch.randn(t, h, generator=gen, dtype=torch.float64)
        x = x * torch.exp2(-((torch.arange(t) + self.seed) % 4).double())[:, None]  # 2^-3..1
        w13 = torch.randint(-127, 128, (e, 2 * i, h), generator=gen, dtype=torch.int8)
        w2 = torch.randint(-127, 128, (e, h, i), generator=gen, dtype=torch.int8)
        # Each expert its own power of two (adjacent experts 2x to 8x apart), each channel a jitter.
        factor = torch.exp2(torch.tensor([float((3 * j) % 5 - 2) for j in range(e)]))[:, None]
        c13 = factor * (0.5 + torch.rand(e, 2 * i, generator=gen, dtype=torch.float64)) * 2 / (127 * h**0.5)
        if self.feature == "split":  # gate 8x, up / 8: the activation's magnitude kept (float16's range)
            c13[:, :i] *= 8.0
            c13[:, i:] /= 8.0
        c2 = factor.flip(0) * (0.5 + torch.rand(e, h, generator=gen, dtype=torch.float64)) / (127 * i**0.5)
        ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(t)])
        weights = 0.1 + torch.rand(t, k, generator=gen, dtype=torch.float64)
        scales = [c.float() for c in (c13, c2)]
        if self.scale_rank3:
            scales = [c[..., None] for c in scales]
        out = (
            x.to(self.dtype),
            w13,
            w2,
            weights.to(self.dtype if self.weights_in_x_dtype else torch.float32),
            ids.to(torch.int32 if self.ids_int32 else torch.int64),
            *scales,
        )
        return tuple(v.to(device) for v in out)


def w8a8_moe_inputs(features=("plain", "split"), shapes=MOE_SHAPES):
    return st.builds(W8a8MoeRecipe, st.sampled_from(shapes), st.sampled_from((torch.bfloat16, torch.float16)),
                     seeds(), st.sampled_from(features), st.booleans(), st.booleans(),
                     st.booleans())  # fmt: skip
