"""A port engineer's backend module with four realistic bugs, for the fast-verdict self-test
(tests/test_fast_verdict.py) and benchmarks/first_verdict.py; loaded like a user's module
(``--backend-module fourbug_backend``, with tests/ on the path).

Everything else is native's. Each bug is one line a port gets wrong; the clause that pins it is
the one a first verdict must name (``ROOT_CAUSES``, by op):

- GEGLU's ``approximate`` is dropped: always the tanh GELU (a kernel with only the tanh path).
  Pinned by ACT-GEGLU-MODES (ACT-GEGLU's bf16/fp32 comparisons see it only as ~1e-5 noise).
- SwiGLU-step's gate clamped on the wrong side: ``silu(gate).clamp(min=-limit)``, the lower
  bound of ``up``'s clamp copied, where the contract caps from above. Pinned by
  ACT-SWIGLU-STEP-ASYM (and ACT-SWIGLU-STEP-BOUND: nothing caps the gate).
- The paged-attention adapter hands its kernel a FlashInfer-style ``last_page_len = seq_len %
  page_size``: 0 for a full last page (it must be in 1 .. page_size), so the kernel reads one
  page too few and places the queries that much earlier. Pinned by SERVE-PAGED (its smallest
  case, one key in a page of one, reads nothing).
- RMSNorm with eps outside the root: ``x / (sqrt(mean(x^2)) + eps)``, the LayerNorm habit, in
  the helper both LLaMA norms share. Pinned by NORM-EPS.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mutants._paged_base import PagedNative
from reference.activations import APPROXIMATE_MODES, validate_gated_input
from reference.norms import validate_norm_args
from reference.validation import require_choice, require_positive_finite_or_none

# The op of each bug, and the clauses that pin it: the first streamed line naming the op must
# name one of them (the gate's wrong side breaks two pinning clauses: either pins it).
ROOT_CAUSES = {
    "gelu_and_mul": ("ACT-GEGLU-MODES",),
    "swiglu_step_and_mul": ("ACT-SWIGLU-STEP-BOUND", "ACT-SWIGLU-STEP-ASYM"),
    "paged_attention": ("SERVE-PAGED",),
    "rms_norm": ("NORM-EPS",),
}


def _compute(*dtypes: torch.dtype) -> torch.dtype:
    """float32, or wider when an input is."""
    out = torch.float32
    for dtype in dtypes:
        out = torch.promote_types(out, dtype)
    return out


def _rms(h: torch.Tensor, weight: torch.Tensor, eps: float, dtype: torch.dtype) -> torch.Tensor:
    """LlamaRMSNorm's order (normalize in h's dtype, cast, then weight), but eps outside the root."""
    return (h / (h.pow(2).mean(-1, keepdim=True).sqrt() + eps)).to(dtype) * weight  # bug: eps


class FourBugs(PagedNative):
    name = "fourbug"
    # The clauses the bugs break and ACT-ERRORS (no bug: checked last), for the self-test's
    # --focus-declared-clauses; a run without that option checks every clause.
    clauses = {
        *(clause for pinning in ROOT_CAUSES.values() for clause in pinning),
        *("ACT-GEGLU", "ACT-SWIGLU-STEP", "NORM-RMS", "SERVE", "ACT-ERRORS"),
    }

    def gelu_and_mul(self, x, *, approximate):
        d = validate_gated_input(x)
        require_choice(approximate, "approximate", APPROXIMATE_MODES)
        return F.gelu(x[..., :d], approximate="tanh") * x[..., d:]  # bug: the mode is dropped

    def swiglu_step_and_mul(self, x, *, limit):
        d = validate_gated_input(x)
        limit = require_positive_finite_or_none(limit, "limit")
        gate, up = x[..., :d], x[..., d:]
        if limit is None:
            return F.silu(gate) * up
        return F.silu(gate).clamp(min=-limit) * up.clamp(-limit, limit)  # bug: the wrong side

    def rms_norm(self, x, weight, *, eps):
        eps = validate_norm_args(x, weight, eps)
        return _rms(x.to(_compute(x.dtype)), weight, eps, x.dtype)

    def fused_add_rms_norm(self, x, residual, weight, *, eps):
        eps = validate_norm_args(x, weight, eps, residual)
        total = x.to(_compute(x.dtype, residual.dtype)) + residual.to(_compute(x.dtype, residual.dtype))
        return _rms(total, weight, eps, x.dtype), total.to(x.dtype)

    # --- the paged adapter: native's algorithm, with the kernel's own idea of the length ---

    @staticmethod
    def kernel_length(meta, b: int) -> int:
        """The length the kernel derives from (pages, last_page_len)."""
        pages = -(-meta.seq_lens[b] // meta.block_size)
        last_page_len = meta.seq_lens[b] % meta.block_size  # bug: 0 for a full page
        return (pages - 1) * meta.block_size + last_page_len

    def key_range(self, meta, b):
        length = self.kernel_length(meta, b)
        return min(meta.first_visible(b), length), length

    def query_positions(self, meta, b, device):
        length = self.kernel_length(meta, b)
        return torch.arange(length - meta.query_len(b), length, device=device)

    def attend(self, q, k, v, allowed, *, meta, sinks):
        # A flash kernel writes 0 for a row that sees no key (here: every row of a lost page).
        out = super().attend(q, k, v, allowed, meta=meta, sinks=sinks)
        return out.masked_fill(~allowed.any(-1)[None, :, None], 0)


BACKEND = FourBugs()
