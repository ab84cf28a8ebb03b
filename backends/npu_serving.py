"""The Ascend adapter's serving attention (spec/serving.md, SERVE; spec/ascend.md, CANN-FIA-V2 and
CANN-PAGED-ATTENTION), installed on ``AscendBackend`` by ``install``.

Two kernels, chosen per call as vllm-ascend's attention does:
- every sequence decodes (query length 1), without a window or sinks: ATB's ``_npu_paged_attention``
  (the decode kernel; it has no mask and no sink input);
- otherwise one ``npu_fused_infer_attention_score_v2`` call in TND over the paged cache, with the
  sinks as its ``learnable_sink`` (in q's dtype; q and the caches zero-padded to head dim 64 or 128,
  the only value D the op takes sinks with): the band (sparse_mode 3 / 4 with the compressed mask),
  for decodes too (the query-length-1 caveat does not cover TND, CANN-FIA-DECODE).
fp8 caches are dequantized into q's dtype first (spec/kv_cache.md, KV-FP8-READ). What neither kernel
can express raises NotImplementedError (softcap; Dv != Dqk; sinks with a value head dim over 128).
Each step is a method, so a mutant can change exactly one (mutants/_serving_npu.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from reference.kv_cache import dequantized_caches
from reference.serving import validate_paged_args

SINK_VALUE_DIMS = (64, 128)  # CANN-FIA-V2: learnable_sink only with value D 64 or 128


def paged_attention(
    self, q, k_cache, v_cache, *, block_table, cu_seqlens_q, seq_lens, sliding_window, softcap, sinks,
    scale, k_scale=None, v_scale=None,
):  # fmt: skip
    """SERVE through _npu_paged_attention (plain decode) or FIA v2 (everything else)."""
    k_cache, v_cache = dequantized_caches(k_cache, v_cache, k_scale, v_scale, getattr(q, "dtype", None))
    meta = validate_paged_args(
        q, k_cache, v_cache, block_table=block_table, cu_seqlens_q=cu_seqlens_q, seq_lens=seq_lens,
        sliding_window=sliding_window, softcap=softcap, sinks=sinks, scale=scale,
    )  # fmt: skip
    require_paged_features(meta, k_cache, v_cache, sinks)
    table = block_table.to(device=q.device, dtype=torch.int32)
    if self.uses_atb_paged_attention(meta, sinks):
        out = q.new_empty(q.shape)
        args = self.atb_paged_args(meta, table)
        self.ops._npu_paged_attention(q.contiguous(), k_cache, v_cache, **args, out=out)
        return out
    sinks = None if sinks is None else sinks.to(q.dtype)  # V4 lists bfloat16/float16, V5 the query's dtype
    q, k_cache, v_cache, width = self.sink_head_dims(q, k_cache, v_cache, sinks)
    num_blocks, block_size, kv_heads, head_dim = k_cache.shape
    key = k_cache.reshape(num_blocks, block_size, kv_heads * head_dim)  # (blocknum, blocksize, H)
    value = v_cache.reshape(num_blocks, block_size, kv_heads * head_dim)
    options = self.fia_v2_args(meta, table, block_size, kv_heads, sinks)
    return self.ops.npu_fused_infer_attention_score_v2(q.contiguous(), key, value, **options)[0][..., :width]


def uses_atb_paged_attention(self, meta, sinks) -> bool:
    """The ATB decode kernel when every sequence decodes with no window and no sinks."""
    decode = all(meta.query_len(b) == 1 for b in range(meta.batch))
    return decode and meta.sliding_window is None and sinks is None


def atb_paged_args(self, meta, table) -> dict:
    """_npu_paged_attention's arguments beside query and the caches (CANN-PAGED-ATTENTION): each
    sequence's own kv length as an int32 host tensor."""
    return {
        "num_kv_heads": meta.kv_heads,
        "num_heads": meta.q_heads,
        "scale_value": meta.scale,
        "block_table": table,
        "context_lens": torch.tensor(meta.seq_lens, dtype=torch.int32),
    }


def sink_head_dims(self, q, k_cache, v_cache, sinks):
    """(q, k_cache, v_cache, D): with sinks and a head dim D other than 64 and 128 (CANN-FIA-V2's V_D),
    all three zero-padded to the next of them: the zero columns add exact zeros to Q K^T and give zero
    output columns, which the caller cuts off (adapter choice)."""
    width = v_cache.shape[3]
    if sinks is None or width in SINK_VALUE_DIMS:
        return q, k_cache, v_cache, width
    pad = (0, min(d for d in SINK_VALUE_DIMS if d > width) - width)
    return F.pad(q, pad), F.pad(k_cache, pad), F.pad(v_cache, pad), width


def fia_v2_args(self, meta, table, block_size: int, kv_heads: int, sinks) -> dict:
    """FIA v2's keywords (CANN-FIA-V2), mask and window included: the band for every TND call."""
    options = {
        "input_layout": "TND",
        "num_query_heads": meta.q_heads,
        "num_key_value_heads": kv_heads,
        "softmax_scale": meta.scale,  # v2's default is 1.0 (ATTN-SCALE)
        "block_table": table,
        "block_size": block_size,  # the cache's own, never a constant (SERVE)
        "actual_seq_qlen": list(meta.query_starts[1:]),  # cumulative ends in TND
        "actual_seq_kvlen": list(meta.seq_lens),  # per sequence with a block_table
    }
    if sinks is not None:
        options["learnable_sink"] = self.learnable_sink(sinks, table.device)
    # TND is outside the query-length-1 caveat (CANN-FIA-DECODE): the band holds for decodes too.
    options["atten_mask"] = self.compressed_mask(table.device)
    options["sparse_mode"] = 3 if meta.sliding_window is None else 4
    options.update(self.cann_prefill_tokens(meta.sliding_window))
    return options


def learnable_sink(self, sinks, device) -> torch.Tensor:
    """SERVE-SINKS' [Hq] logits (already in q's dtype) as v2's learnable_sink, in query-head order
    (head h's kv head is h // group, as FIA's GQA; CANN-FIA-V2)."""
    return sinks.to(device).contiguous()


def require_paged_features(meta, k_cache, v_cache, sinks) -> None:
    """What the paged kernels cannot express raises NotImplementedError (CANN-FIA-V2)."""
    if meta.softcap is not None:
        raise NotImplementedError("softcap: neither FIA v2 nor _npu_paged_attention has logit softcapping")
    if v_cache.shape[3] != k_cache.shape[3]:
        raise NotImplementedError(
            f"Dv={v_cache.shape[3]} != Dqk={k_cache.shape[3]}: FIA v2's paged path requires key and value "
            "of identical shapes"
        )
    if sinks is not None and v_cache.shape[3] > max(SINK_VALUE_DIMS):
        raise NotImplementedError(f"sinks: FIA v2 takes learnable_sink only with value D {SINK_VALUE_DIMS}")


def install(cls, compressed_mask) -> None:
    """The serving methods on the adapter class; ``compressed_mask(device)`` is FIA's 2048x2048 mask."""
    cls.compressed_mask = staticmethod(compressed_mask)
    for method in (paged_attention, uses_atb_paged_attention, atb_paged_args, sink_head_dims, fia_v2_args,
                   learnable_sink):  # fmt: skip
        setattr(cls, method.__name__, method)
