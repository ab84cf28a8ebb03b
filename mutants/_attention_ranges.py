"""Attention mutants that the checks once let through (spec/attention.md, Ranges; listed by
``mutants/masks.py``): an output of another dtype than q's, which every comparison read as float64
(rule 3: no comparison discards a dtype a clause names). The docstring says the bug, its origin and
the clauses that catch it.
"""

from __future__ import annotations

import torch

from backends.native import NativeBackend


class PrefillOutputInFloat32(NativeBackend):
    """prefill_attention computes half-precision inputs in float32 and returns the float32 result
    without casting it back to q's dtype: the values are nearer the oracle, the dtype wrong (a
    bfloat16 model's next matmul gets float32 activations, or fails).

    Origin: an upcast for the softmax whose final cast was dropped (the scheduler's OutputLeftInFloat32
    is the same bug); the comparison took any dtype to float64, so only the values were judged.
    Caught by: ATTN-PREFILL, ATTN-SCALE.
    """

    name = "attention-prefill-output-in-float32"
    clauses = {"ATTN-PREFILL", "ATTN-SCALE"}

    def prefill_attention(self, q, k, v, *, sliding_window, padding_mask, scale):
        if q.dtype in (torch.float16, torch.bfloat16):
            q, k, v = (t.float() for t in (q, k, v))
        options = {"sliding_window": sliding_window, "padding_mask": padding_mask, "scale": scale}
        return super().prefill_attention(q, k, v, **options)


BACKENDS = [PrefillOutputInFloat32()]
