"""The ``native`` backend's serving ops (spec/serving.md), and the paged-cache helpers other
backends and mutants build on.

A sequence's keys are gathered from its blocks (only positions ``e_b .. L_b - 1``: SERVE-EVICT,
SERVE-PAGED), then attended in the input's dtype: through ``F.scaled_dot_product_attention``
with a bool mask when there is neither softcap nor sinks, and otherwise in plain PyTorch in
float32 (or float64 for float64 inputs), rounded once to q's dtype. Its window arguments are the
contract's own (SERVE-WINDOW-ARGS: it builds its masks from the canonical W, so both paths get W).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from reference.kv_cache import dequantized_caches
from reference.masks import require_window
from reference.serving import ServingBatch, validate_paged_args
from reference.serving_windows import use_sliding_window, validate_layer_config, window_kernel_args

__all__ = [
    "band",
    "gather_positions",
    "layer_windows",
    "paged_attention",
    "sequence_allowed",
    "window_kernel_args",
]


def gather_positions(cache: torch.Tensor, table, block_size: int, start: int, stop: int) -> torch.Tensor:
    """Positions ``start .. stop - 1`` of one sequence from a paged cache: [stop - start, Hkv, D]."""
    first, last = start // block_size, (stop - 1) // block_size
    ids = torch.as_tensor(table[first : last + 1], dtype=torch.long, device=cache.device)
    offset = start - first * block_size
    return cache.index_select(0, ids).flatten(0, 1)[offset : offset + stop - start]


def band(positions: torch.Tensor, keys: torch.Tensor, window: int | None) -> torch.Tensor:
    """SERVE's mask between query positions [n, 1] and key positions [1, K]: key <= position and
    position - key < W (True = attend)."""
    allowed = keys <= positions
    if window is not None:
        allowed &= positions - keys < window
    return allowed


def sequence_allowed(meta: ServingBatch, b: int, device) -> tuple[torch.Tensor, int]:
    """SERVE's mask for sequence b: bool [n_b, L_b - e_b] (True = attend) over keys e_b .. L_b - 1,
    and e_b."""
    length, first_key = meta.seq_lens[b], meta.first_visible(b)
    positions = torch.arange(length - meta.query_len(b), length, device=device)[:, None]
    keys = torch.arange(first_key, length, device=device)[None, :]
    return band(positions, keys, meta.sliding_window), first_key


def _attend(q, k, v, allowed, *, scale, softcap, sinks):
    """q [Hq, n, D], k/v [Hkv, K, D*] -> [Hq, n, Dv] in q's dtype."""
    if softcap is None and sinks is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale, enable_gqa=True)
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    group = q.shape[0] // k.shape[0]
    k, v = (t.to(compute).repeat_interleave(group, dim=0) for t in (k, v))
    scores = q.to(compute) @ k.transpose(-1, -2) * scale
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        # The sink is one more logit in the softmax whose column is dropped (gpt-oss's eager form).
        sink = sinks.to(compute)[:, None, None].expand(-1, scores.shape[1], 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    return (probs @ v).to(q.dtype)


def paged_attention(
    q, k_cache, v_cache, *, block_table, cu_seqlens_q, seq_lens, sliding_window, softcap, sinks, scale,
    k_scale=None, v_scale=None,
):  # fmt: skip
    """SERVE: per sequence, gather its visible keys, then SDPA (or the softcap/sinks form). fp8 caches
    are dequantized into q's dtype first (spec/kv_cache.md, KV-FP8-READ). vLLM's zero-length padded
    requests are accepted and produce no row (spec/padding.md, PAD-SERVE-EMPTY)."""
    k_cache, v_cache = dequantized_caches(k_cache, v_cache, k_scale, v_scale, getattr(q, "dtype", None))
    meta = validate_paged_args(
        q, k_cache, v_cache, block_table=block_table, cu_seqlens_q=cu_seqlens_q, seq_lens=seq_lens,
        sliding_window=sliding_window, softcap=softcap, sinks=sinks, scale=scale, empty_requests=True,
    )  # fmt: skip
    out = q.new_empty(q.shape[0], q.shape[1], v_cache.shape[3])
    for b in range(meta.batch):
        if meta.seq_lens[b] == 0:  # a zero-length padded request: no query row, no key
            continue
        allowed, first_key = sequence_allowed(meta, b, q.device)
        table, length = meta.block_tables[b], meta.seq_lens[b]
        k = gather_positions(k_cache, table, meta.block_size, first_key, length).transpose(0, 1)
        v = gather_positions(v_cache, table, meta.block_size, first_key, length).transpose(0, 1)
        rows = slice(meta.query_starts[b], meta.query_starts[b + 1])
        result = _attend(q[rows].transpose(0, 1), k, v, allowed, scale=meta.scale, softcap=meta.softcap,
                         sinks=sinks)  # fmt: skip
        out[rows] = result.transpose(0, 1)
    return out


def _legacy_kinds(config, layers: int) -> list[str]:
    """The ``layer_types`` a transformers config fills for this model type (SERVE-LAYER-WINDOWS)."""
    model_type = getattr(config, "model_type", "")
    if model_type in ("gemma2", "gpt_oss"):
        slides = [i % 2 == 0 for i in range(layers)]
    elif model_type in ("gemma3", "gemma3_text", "cohere2"):
        pattern = getattr(config, "sliding_window_pattern", 4 if model_type == "cohere2" else 6)
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            raise ValueError(f"config.sliding_window_pattern must be an int >= 1, got {pattern!r}")
        slides = [(i + 1) % pattern != 0 for i in range(layers)]
    elif model_type in ("qwen2", "qwen3", "qwen2_moe"):
        first_full = getattr(config, "max_window_layers", 28)
        if isinstance(first_full, bool) or not isinstance(first_full, int) or first_full < 0:
            raise ValueError(f"config.max_window_layers must be an int >= 0, got {first_full!r}")
        if model_type == "qwen2_moe":
            slides = [i % 2 == 0 and i < first_full for i in range(layers)]
        else:
            slides = [i >= first_full for i in range(layers)]
    else:
        slides = [True] * layers
    return ["sliding_attention" if s else "full_attention" for s in slides]


def layer_windows(config) -> list[int | None]:
    """SERVE-LAYER-WINDOWS as a serving framework reads a transformers config: ``layer_types``
    when the config has it, else the model type's rule."""
    layers, window, kinds = validate_layer_config(config)
    if kinds is None:
        if window is None or not use_sliding_window(config):
            return [None] * layers
        kinds = _legacy_kinds(config, layers)
    if "sliding_attention" in kinds:
        require_window(window, "config.sliding_window", optional=False)
    return [window if kind == "sliding_attention" else None for kind in kinds]
