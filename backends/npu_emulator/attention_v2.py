"""Emulated ``torch_npu.npu_fused_infer_attention_score_v2`` (FIA v2), as documented
(spec/ascend.md, CANN-FIA-V2).

The v2 op is v1 (CANN-FIA, CANN-FIA-PAGED) under other keyword names, plus ``learnable_sink``:

    v1 num_heads             -> v2 num_query_heads
    v1 scale                 -> v2 softmax_scale      (default 1.0, NOT 1/sqrt(D))
    v1 actual_seq_lengths    -> v2 actual_seq_qlen
    v1 actual_seq_lengths_kv -> v2 actual_seq_kvlen

Every keyword is keyword-only and the signature is the documented one, so a keyword the binding does
not have (v1's ``num_heads``, ``scale``, ...) is a TypeError, as it is for the real binding. Emulated:
``input_layout="TND"`` with a ``block_table`` (the paged path, computed by v1's machinery in
``paged_attention.py``), and ``learnable_sink`` [num_query_heads] there: bfloat16 or float16, value D
64 or 128 (aclnnFusedInferAttentionScoreV4), its arithmetic the vendor's golden's. The other
documented keywords (rope, pse, quantization, ...) must keep their defaults; otherwise, like every
other violation, a RuntimeError.
"""

from __future__ import annotations

import torch

from backends.npu_emulator.attention import SUPPORTED_DTYPES
from backends.npu_emulator.paged_attention import fia_tnd_paged

MAX_TOKENS = 2147483647
SINK_DTYPES = (torch.bfloat16, torch.float16)  # documented (V4); float32 only beside a float32 query
SINK_VALUE_DIMS = (64, 128)  # V4: "V_D can only be 128/64"
# Documented keywords the emulator does not model: they must keep their defaults (None, or 0).
NOT_EMULATED = (
    "query_rope",
    "key_rope",
    "pse_shift",
    "dequant_scale_query",
    "dequant_scale_key",
    "dequant_offset_key",
    "dequant_scale_value",
    "dequant_offset_value",
    "dequant_scale_key_rope",
    "quant_scale_out",
    "quant_offset_out",
    "query_dtype",
    "key_dtype",
    "value_dtype",
    "query_rope_dtype",
    "key_rope_dtype",
    "key_shared_prefix_dtype",
    "value_shared_prefix_dtype",
    "dequant_scale_query_dtype",
    "dequant_scale_key_dtype",
    "dequant_scale_value_dtype",
    "dequant_scale_key_rope_dtype",
)
QUANT_MODES = ("query_quant_mode", "key_quant_mode", "value_quant_mode")


def _fail(message: str):
    raise RuntimeError(f"npu_fused_infer_attention_score_v2: {message}")


def _check_sink(learnable_sink, query_dtype, num_query_heads: int, value_dim: int) -> None:
    """CANN-FIA-V2: bfloat16 or float16 (float32 beside a float32 query: emulator choice), shape
    (Q_N,), TND only (the only layout emulated), value D 64 or 128 (the paged cache's value D is the
    query's: key and value have identical shapes)."""
    dtypes = SINK_DTYPES + ((torch.float32,) if query_dtype == torch.float32 else ())
    if not isinstance(learnable_sink, torch.Tensor) or learnable_sink.dtype not in dtypes:
        _fail(
            "learnable_sink must be a bfloat16 or float16 tensor: "
            f"{getattr(learnable_sink, 'dtype', learnable_sink)!r}"
        )
    if tuple(learnable_sink.shape) != (num_query_heads,):
        _fail(
            f"learnable_sink must be ({num_query_heads},) (num_query_heads,): {tuple(learnable_sink.shape)}"
        )
    if value_dim not in SINK_VALUE_DIMS:
        _fail(f"learnable_sink needs value D 64 or 128, got {value_dim}")


def npu_fused_infer_attention_score_v2(
    query, key, value, *, query_rope=None, key_rope=None, pse_shift=None, atten_mask=None,
    actual_seq_qlen=None, actual_seq_kvlen=None, block_table=None, dequant_scale_query=None,
    dequant_scale_key=None, dequant_offset_key=None, dequant_scale_value=None, dequant_offset_value=None,
    dequant_scale_key_rope=None, quant_scale_out=None, quant_offset_out=None, learnable_sink=None,
    num_query_heads=1, num_key_value_heads=0, softmax_scale=1.0, pre_tokens=MAX_TOKENS,
    next_tokens=MAX_TOKENS, input_layout="BSH", sparse_mode=0, block_size=0, query_quant_mode=0,
    key_quant_mode=0, value_quant_mode=0, inner_precise=0, return_softmax_lse=False, query_dtype=None,
    key_dtype=None, value_dtype=None, query_rope_dtype=None, key_rope_dtype=None,
    key_shared_prefix_dtype=None, value_shared_prefix_dtype=None, dequant_scale_query_dtype=None,
    dequant_scale_key_dtype=None, dequant_scale_value_dtype=None, dequant_scale_key_rope_dtype=None,
):  # fmt: skip
    """(attention_out [T, Q_N, D], softmax_lse [1]) for the paged TND call; see the module docstring."""
    arguments = dict(locals())  # the call's arguments, by their documented names
    given = [name for name in NOT_EMULATED if arguments[name] is not None]
    given += [name for name in QUANT_MODES if arguments[name] != 0]
    if given or return_softmax_lse:
        _fail(f"arguments not emulated: {given + ['return_softmax_lse'] * bool(return_softmax_lse)}")
    if inner_precise not in (0, 1, 2, 3):
        _fail(f"inner_precise must be 0..3, got {inner_precise!r}")
    if input_layout != "TND" or block_table is None:
        _fail(f"emulated: input_layout 'TND' with a block_table; got {input_layout!r}")
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if not isinstance(tensor, torch.Tensor) or tensor.dtype not in SUPPORTED_DTYPES:
            _fail(f"{name} must be a float16/bfloat16/float32 tensor")
    if key.dtype != query.dtype or value.dtype != query.dtype:
        _fail("key and value must have the query's dtype")
    if learnable_sink is not None:
        _check_sink(learnable_sink, query.dtype, num_query_heads, query.shape[-1])
    return fia_tnd_paged(
        query, key, value, atten_mask=atten_mask, actual_seq_lengths=actual_seq_qlen,
        actual_seq_lengths_kv=actual_seq_kvlen, num_heads=num_query_heads,
        num_key_value_heads=num_key_value_heads, scale=softmax_scale, pre_tokens=pre_tokens,
        next_tokens=next_tokens, sparse_mode=sparse_mode, block_table=block_table, block_size=block_size,
        learnable_sink=learnable_sink, names=("actual_seq_qlen", "actual_seq_kvlen"),
    )  # fmt: skip
