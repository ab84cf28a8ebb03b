"""Model-profile mutants (spec/models.md, MODEL-RUN): bugs that only a model's own parameters reach
(listed by ``mutants/rope.py``).

Each is wrong at one fixed parameter that the generic draws never take, so a generic run passes
it; each declares the profile it is wrong at (``opconform_model``), and the plugin draws that
backend's cases at that model's parameters (MODEL-BACKEND), where its clauses must catch it. Each
docstring says the bug, its origin and the clauses that catch it.
"""

from __future__ import annotations

import torch

from backends import rope as native_rope
from backends.native import NativeBackend
from reference.rope import validate_rope_args

MODEL = "step3p5"  # the profile these mutants are wrong at
TILE = 64  # the rotary width the kernel mis-handles (Step-3.5's full-attention layers: 128 * 0.5)


class RotaryDim64LastPair(NativeBackend):
    """At rotary_dim 64 exactly, the last rotated pair is left unrotated (a loop bound that is one
    short only when the rotary width fills the kernel's 64-wide tile); every other width is right.

    Origin: the field's shape-specific rope bugs (a Triton rope wrong only at head_dim 192,
    spec/models.md MODEL-RUN): the generic draws (rotary_dim 2..32, 96, 128, 256) never take 64,
    Step-3.5's full-attention layers (partial_rotary_factor 0.5 of head_dim 128) always do.
    Caught by: ROPE-APPLY, ROPE-PARTIAL.
    """

    name = "model-rope-dim64-last-pair"
    clauses = {"ROPE-APPLY", "ROPE-PARTIAL"}
    opconform_model = MODEL

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style)
        q, k = native_rope.rotary_embedding(positions, query, key, cos_sin_cache, is_neox_style=is_neox_style)
        if cos_sin_cache.shape[-1] != TILE:
            return q, k
        last = [TILE // 2 - 1, TILE - 1] if is_neox_style else [TILE - 2, TILE - 1]
        index = torch.tensor(last, device=query.device)
        return q.index_copy(-1, index, query.index_select(-1, index).to(q.dtype)), k.index_copy(
            -1, index, key.index_select(-1, index).to(k.dtype)
        )


BACKENDS = [RotaryDim64LastPair()]
