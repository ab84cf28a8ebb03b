"""The rope bench cases (spec/rope.md: ROPE-APPLY, ROPE-COS-SIN) and their inputs.

Shapes and where they come from (transformers 5.24 configs):

- Llama-3-8B: 32 query heads, 8 key heads, head_dim 128, NeoX pairing, Llama 3.1's llama3 scaling
  (factor 8, low 1, high 4, original 8192, base 500000); a prefill of 8192 tokens.
- DeepSeek-V3: 128 query heads, the shared rope key (1 head), qk_rope_head_dim 64, GPT-J pairing
  (transformers' ``apply_rotary_pos_emb_interleave``), YaRN factor 40 on an original 4096; 8192 tokens.

The cache covers positions 0 .. 8191 plus an extend offset of 1024, the rows ``rope_cos_sin`` gives
for the config's frequencies; the tokens continue at that offset.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from benchmarks.case_types import Case
from reference import rope

__all__ = ["ROPE_CASES"]

_LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_theta": 500000.0,
}
_DEEPSEEK = {
    "rope_type": "yarn",
    "factor": 40.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
    "rope_theta": 10000.0,
}


def _frequencies(p):
    config = SimpleNamespace(
        head_dim=p["rotary_dim"], max_position_embeddings=163840, rope_parameters=p["rope"]
    )
    inv, factor = rope.rope_inv_freq(config, seq_len=None, layer_type=None)
    return inv.float(), factor


def _apply(p, device, dtype):
    inv, factor = _frequencies(p)
    offset, tokens = p["offset"], p["tokens"]
    cache = rope.rope_cos_sin(torch.arange(offset + tokens), inv, attention_factor=factor).float().to(device)
    positions = (offset + torch.arange(tokens)).to(device)
    q = torch.randn(tokens, p["q_heads"], p["head_dim"], device=device, dtype=dtype)
    k = torch.randn(tokens, p["k_heads"], p["head_dim"], device=device, dtype=dtype)
    return (positions, q, k, cache), {"is_neox_style": p["neox"]}


def _cos_sin(p, device, dtype):
    inv, factor = _frequencies(p)
    return (torch.arange(p["offset"] + p["tokens"], device=device), inv.to(device)), {
        "attention_factor": factor
    }


_LLAMA = {
    "tokens": 8192,
    "offset": 1024,
    "q_heads": 32,
    "k_heads": 8,
    "head_dim": 128,
    "rotary_dim": 128,
    "neox": True,
    "rope": _LLAMA3,
}
_DSV3 = {
    "tokens": 8192,
    "offset": 1024,
    "q_heads": 128,
    "k_heads": 1,
    "head_dim": 64,
    "rotary_dim": 64,
    "neox": False,
    "rope": _DEEPSEEK,
}
_QUICK = {"tokens": 16, "offset": 4, "q_heads": 2, "k_heads": 1}

ROPE_CASES: tuple[Case, ...] = (
    Case(
        "rotary_embedding/llama3-8b-prefill",
        "rotary_embedding",
        "rope",
        "Llama-3-8B rope: Hq 32, Hk 8, D 128, NeoX, llama3 scaling, 8192 tokens at offset 1024",
        _LLAMA,
        _apply,
        quick_params={**_LLAMA, **_QUICK},
    ),
    Case(
        "rotary_embedding/deepseek-v3-prefill",
        "rotary_embedding",
        "rope",
        "DeepSeek-V3 rope: Hq 128, shared k_pe, D 64, GPT-J, YaRN factor 40, 8192 tokens at offset 1024",
        _DSV3,
        _apply,
        quick_params={**_DSV3, **_QUICK},
    ),
    Case(
        "rope_cos_sin/llama3-8b-cache",
        "rope_cos_sin",
        "rope",
        "Llama-3-8B cos/sin cache rows: 64 frequencies (llama3 scaling), positions 0 .. 9215",
        _LLAMA,
        _cos_sin,
        quick_params={**_LLAMA, **_QUICK},
    ),
)
