"""The norm bench cases (spec/norms.md: NORM-RMS, NORM-GEMMA, NORM-FUSED-ADD) and their inputs.

Shapes and where they come from (transformers 5.24 configs):

- SANA text encoder = Gemma2-2B: hidden 2304, ``rms_norm_eps`` 1e-6 (``Gemma2Config``), Gemma's
  (1 + weight) RMSNorm; prompts padded to S = 300 tokens, CFG batch 2 (as ``benchmarks/cases.py``).
- Step-3.5: hidden 4096, ``rms_norm_eps`` 1e-5 (``Step3p7TextConfig``, taken to match
  Step-3.5-Flash as in ``benchmarks/cases.py``); a prefill chunk of 4096 tokens, the plain RMSNorm
  and the fused residual add a decoder layer does before each block.

The weight is drawn near 1 (RMSNorm) or near 0 (Gemma's 1 + weight), the residual in the
activations' dtype.
"""

from __future__ import annotations

import torch

from benchmarks.case_types import Case

__all__ = ["NORM_CASES"]


def _norm(p, device, dtype):
    x = torch.randn(*p["rows"], p["hidden"], device=device, dtype=dtype)
    centre = 0.0 if p.get("gemma") else 1.0
    weight = (centre + 0.1 * torch.randn(p["hidden"])).to(device=device, dtype=dtype)
    if p.get("fused"):
        residual = torch.randn(*p["rows"], p["hidden"], device=device, dtype=dtype)
        return (x, residual, weight), {"eps": p["eps"]}
    return (x, weight), {"eps": p["eps"]}


_GEMMA2 = {"rows": [2, 300], "hidden": 2304, "eps": 1e-6, "gemma": True}
_STEP = {"rows": [4096], "hidden": 4096, "eps": 1e-5}

NORM_CASES: tuple[Case, ...] = (
    Case(
        "rms_norm/step-prefill",
        "rms_norm",
        "norms",
        "Step-3.5 RMSNorm: hidden 4096, eps 1e-5, a prefill chunk of 4096 tokens",
        _STEP,
        _norm,
        quick_params={**_STEP, "rows": [32], "hidden": 64},
    ),
    Case(
        "gemma_rms_norm/sana-gemma2-encoder",
        "gemma_rms_norm",
        "norms",
        "SANA text encoder Gemma2-2B RMSNorm (1 + weight): hidden 2304, eps 1e-6, S=300, CFG batch 2",
        _GEMMA2,
        _norm,
        quick_params={**_GEMMA2, "rows": [2, 8], "hidden": 64},
    ),
    Case(
        "fused_add_rms_norm/step-prefill",
        "fused_add_rms_norm",
        "norms",
        "Step-3.5 residual add + RMSNorm: hidden 4096, eps 1e-5, a prefill chunk of 4096 tokens",
        {**_STEP, "fused": True},
        _norm,
        quick_params={**_STEP, "rows": [32], "hidden": 64, "fused": True},
    ),
    Case(
        "gemma_fused_add_rms_norm/sana-gemma2-encoder",
        "gemma_fused_add_rms_norm",
        "norms",
        "SANA Gemma2-2B residual add + Gemma RMSNorm: hidden 2304, eps 1e-6, S=300, CFG batch 2",
        {**_GEMMA2, "fused": True},
        _norm,
        quick_params={**_GEMMA2, "rows": [2, 8], "hidden": 64, "fused": True},
    ),
)
