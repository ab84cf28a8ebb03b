"""The emulated FIA v2 and ATB paged attention follow spec/ascend.md (CANN-FIA-V2,
CANN-PAGED-ATTENTION), and the adapter reaches both kernels."""

from __future__ import annotations

import pytest
import torch

from backends.npu import EMULATED
from backends.npu_emulator import _npu_paged_attention as atb_paged
from backends.npu_emulator import npu_fused_infer_attention_score as fia
from backends.npu_emulator import npu_fused_infer_attention_score_v2 as fia_v2
from conformance.checks import assert_close
from reference import serving
from reference.attention import decode_attention
from tests.test_npu_emulator_serving import COMPRESSED, HKV, HQ, SCALE, _batch, _paged

D = 8
# CANN-FIA-V2's keyword mapping, v1 name -> v2 name.
V1_TO_V2 = {
    "num_heads": "num_query_heads",
    "scale": "softmax_scale",
    "actual_seq_lengths": "actual_seq_qlen",
    "actual_seq_lengths_kv": "actual_seq_kvlen",
}


def _v1_call(q_lens, kv_lens, **options) -> dict:
    ends = torch.tensor(q_lens).cumsum(0).tolist()
    return dict(input_layout="TND", num_heads=HQ, num_key_value_heads=HKV, scale=SCALE, block_size=3,
                actual_seq_lengths=ends, actual_seq_lengths_kv=kv_lens, **options)  # fmt: skip


def _as_v2(options: dict) -> dict:
    return {V1_TO_V2.get(name, name): value for name, value in options.items()}


@pytest.mark.parametrize(
    "q_lens, kv_lens, options",
    [
        ([3, 1, 4], [7, 5, 4], {"sparse_mode": 3, "atten_mask": COMPRESSED}),
        ([2, 3], [9, 3], {"sparse_mode": 4, "atten_mask": COMPRESSED, "pre_tokens": 2, "next_tokens": 0}),
        ([1, 1], [6, 4], {}),
    ],
    ids=["causal", "band", "decode"],
)
def test_v2_equals_v1_under_the_keyword_mapping(q_lens, kv_lens, options):
    """The same call with v1's names renamed to v2's gives the same bits (CANN-FIA-V2)."""
    key, value, table, _ = _paged(kv_lens, block_size=3)
    q = torch.randn(sum(q_lens), HQ, D)
    v1 = _v1_call(q_lens, kv_lens, block_table=table, **options)
    assert torch.equal(fia_v2(q, key, value, **_as_v2(v1))[0], fia(q, key, value, **v1)[0])


def test_softmax_scale_defaults_to_one():
    """Without softmax_scale v2 scales by 1.0, not 1/sqrt(D): the output differs from SCALE's."""
    key, value, table, _ = _paged([5], block_size=3)
    q = torch.randn(2, HQ, D)
    call = _as_v2(_v1_call([2], [5], block_table=table, sparse_mode=3, atten_mask=COMPRESSED))
    unit = dict(call, softmax_scale=1.0)
    del call["softmax_scale"]
    assert torch.equal(fia_v2(q, key, value, **call)[0], fia_v2(q, key, value, **unit)[0])
    assert not torch.allclose(
        fia_v2(q, key, value, **call)[0], fia_v2(q, key, value, **dict(unit, softmax_scale=SCALE))[0]
    )


def _golden_sink_attention(q, k, v, sinks, softmax_scale):
    """Ascend/op-plugin's golden for learnable_sink (test/test_custom_ops/
    test_npu_fused_infer_attention_score_v2.py, ``supported_op_exec_sink`` and ``npSoftmax_new``, commit
    7634a58), restated: q [S, N, D], k and v [S_kv, N, D] as [1, N, S, D] in float64, the scores
    scaled, the sinks viewed (1, N, 1, 1) and broadcast over the query rows as one more column, the
    max-subtracted softmax over it, the column dropped, then times v; [S, N, D]."""
    q4, k4, v4 = (t.permute(1, 0, 2)[None].double() for t in (q, k, v))
    scores = q4 @ k4.transpose(3, 2) * softmax_scale
    column = sinks.double().view(1, -1, 1, 1).broadcast_to(1, sinks.shape[0], scores.shape[2], 1)
    scores = torch.cat([scores, column], dim=-1)
    y = torch.exp(scores - scores.max(dim=-1, keepdim=True)[0])
    probs = (y / y.sum(dim=-1, keepdim=True))[..., :-1]
    return (probs @ v4)[0].permute(1, 0, 2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_learnable_sink_equals_the_vendors_golden(dtype):
    """One TND sequence, no mask (the golden's call), Q_N = KV_N = 8, D = 128, distinct sinks per head
    and random inputs (the golden's own test uses all ones): the emulated v2 equals the golden's
    arithmetic within the attention tolerance (CANN-FIA-V2: documented)."""
    gen = torch.Generator().manual_seed(3)
    heads, dim, s_q, s_kv, block = 8, 128, 5, 12, 4
    q, k, v = (torch.randn(n, heads, dim, generator=gen).to(dtype) for n in (s_q, s_kv, s_kv))
    sinks = torch.linspace(-2.0, 3.0, heads).to(dtype)
    table = torch.arange(s_kv // block, dtype=torch.int32)[None]
    key, value = (t.reshape(s_kv // block, block, heads * dim) for t in (k, v))
    out, _ = fia_v2(q, key, value, learnable_sink=sinks, num_query_heads=heads, num_key_value_heads=heads,
                    softmax_scale=dim**-0.5, input_layout="TND", actual_seq_qlen=[s_q],
                    actual_seq_kvlen=[s_kv], block_table=table, block_size=block)  # fmt: skip
    golden = _golden_sink_attention(q, k, v, sinks, dim**-0.5)
    assert_close(out, golden, clause="SERVE-SINKS", family="attention", context=str(dtype), dtype=dtype)
    swapped = _golden_sink_attention(q, k, v, sinks.flip(0), dim**-0.5)  # another head's sink: far off
    assert not torch.allclose(out.double(), swapped, rtol=0.02, atol=0.02)


@pytest.mark.parametrize("window", [None, 3])
def test_learnable_sink_equals_the_sink_oracle(window):
    """learnable_sink [Q_N] is one extra logit per query head in the denominator, no value row: the
    adapter's v2 call (head dim 8 padded to 64) equals reference.serving's SERVE-SINKS oracle."""
    q, k_cache, v_cache, meta = _batch([3, 1], [7, 5], 3)
    sinks = torch.tensor([-1.0, 0.5, 2.0, 20.0])
    args = dict(meta, sliding_window=window, softcap=None, sinks=sinks, scale=SCALE)
    actual = EMULATED.paged_attention(q, k_cache, v_cache, **args)
    expected = serving.paged_attention(q, k_cache, v_cache, **args)
    assert_close(actual, expected, clause="SERVE-SINKS", family="attention", context=f"W={window}",
                 dtype=torch.float32)  # fmt: skip
    plain = EMULATED.paged_attention(q, k_cache, v_cache, **dict(args, sinks=None))
    assert (actual.abs() < plain.abs() + 1e-6).all() and not torch.allclose(actual, plain)  # mass on the sink


def _sink_call(width: int, dtype=torch.bfloat16):
    """q, key, value at head dim ``width`` in ``dtype`` and the v2 keywords of a one-token TND call."""
    key, value, table, _ = _paged([4], block_size=3)
    wide = (t.unflatten(2, (HKV, D)).repeat_interleave(-(-width // D), -1)[..., :width] for t in (key, value))
    key, value = wide
    q = torch.randn(1, HQ, width).to(dtype)
    call = _as_v2(_v1_call([1], [4], block_table=table))
    return q, key.flatten(2).to(dtype), value.flatten(2).to(dtype), call


def test_learnable_sink_restrictions_raise():
    """Not (Q_N,), not a bfloat16/float16 tensor (float32 only beside a float32 query), or a value D
    other than 64 and 128: RuntimeError naming learnable_sink; bfloat16 and float16 sinks at D 64 and
    128 run (CANN-FIA-V2, aclnnFusedInferAttentionScoreV4)."""
    q, key, value, call = _sink_call(64)
    for sink in (torch.zeros(HKV, dtype=torch.bfloat16), torch.zeros(HQ, dtype=torch.int32), [0.0] * HQ,
                 torch.zeros(HQ)):  # fmt: skip
        with pytest.raises(RuntimeError, match="learnable_sink"):
            fia_v2(q, key, value, learnable_sink=sink, **call)
    for width in (8, 96, 136):
        q, key, value, call = _sink_call(width)
        with pytest.raises(RuntimeError, match="learnable_sink needs value D 64 or 128"):
            fia_v2(q, key, value, learnable_sink=torch.zeros(HQ, dtype=torch.bfloat16), **call)
    for width in (64, 128):
        for dtype in (torch.bfloat16, torch.float16):
            q, key, value, call = _sink_call(width, dtype)
            out = fia_v2(q, key, value, learnable_sink=torch.zeros(HQ, dtype=dtype), **call)[0]
            assert torch.isfinite(out).all()
    q, key, value, call = _sink_call(64, torch.float32)
    fia_v2(q, key, value, learnable_sink=torch.zeros(HQ), **call)  # the emulator's float32 extension


@pytest.mark.parametrize("v1_name", sorted(V1_TO_V2))
def test_v1_keywords_are_a_type_error(v1_name):
    """v1's keyword names are not v2's: TypeError, as the binding raises for an unknown keyword."""
    key, value, table, _ = _paged([4], block_size=3)
    call = _as_v2(_v1_call([1], [4], block_table=table))
    with pytest.raises(TypeError, match=v1_name):
        fia_v2(torch.randn(1, HQ, D), key, value, **{v1_name: call.pop(V1_TO_V2[v1_name])}, **call)


def test_undocumented_or_not_emulated_v2_arguments_raise():
    """Documented keywords the emulator does not model, and layouts other than paged TND: RuntimeError."""
    key, value, table, _ = _paged([4], block_size=3)
    q = torch.randn(1, HQ, D)
    call = _as_v2(_v1_call([1], [4], block_table=table))
    for extra in ({"return_softmax_lse": True}, {"key_quant_mode": 1}, {"pse_shift": torch.zeros(1)}):
        with pytest.raises(RuntimeError, match="not emulated"):
            fia_v2(q, key, value, **call, **extra)
    with pytest.raises(RuntimeError, match="TND"):
        fia_v2(q, key, value, **dict(call, input_layout="BSH"))


def _atb_args(kv_lens, block_size=3, seed=0):
    key, value, table, dense = _paged(kv_lens, block_size=block_size, seed=seed)
    q = torch.randn(len(kv_lens), HQ, D, generator=torch.Generator().manual_seed(seed + 5))
    caches = (key.unflatten(2, (HKV, D)), value.unflatten(2, (HKV, D)))
    return q, *caches, table, dense


def test_atb_paged_attention_writes_out_with_the_decode_oracle():
    """_npu_paged_attention writes the decode oracle (each token's own context length, stale NaN
    slots unread) into ``out`` in place and returns None (CANN-PAGED-ATTENTION)."""
    kv_lens = [7, 1, 5]
    q, k_cache, v_cache, table, dense = _atb_args(kv_lens)
    out = torch.full_like(q, float("nan"))
    storage = out.data_ptr()
    result = atb_paged(
        q, k_cache, v_cache, HKV, HQ, SCALE, table, torch.tensor(kv_lens, dtype=torch.int32), out
    )
    assert result is None and out.data_ptr() == storage
    for b, (k, v) in enumerate(dense):
        k4, v4 = k.permute(1, 0, 2)[None], v.permute(1, 0, 2)[None]
        lengths = torch.tensor([kv_lens[b]])
        want = decode_attention(q[b][None, :, None], k4, v4, lengths, sliding_window=None, scale=SCALE)[
            0, :, 0
        ]
        torch.testing.assert_close(out[b], want.float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("change", ["int64_lens", "device_lens_shape", "int64_table", "bad_out", "heads"])
def test_atb_paged_attention_violations_raise(change):
    """int32 host context_lens of one entry per token, an int32 table, an out of q's shape and dtype,
    matching head counts: otherwise RuntimeError naming the argument."""
    q, k_cache, v_cache, table, _ = _atb_args([4, 2])
    args = dict(num_kv_heads=HKV, num_heads=HQ, scale_value=SCALE, block_table=table,
                context_lens=torch.tensor([4, 2], dtype=torch.int32), out=torch.empty_like(q))  # fmt: skip
    name = {"int64_lens": "context_lens", "device_lens_shape": "context_lens", "int64_table": "block_table",
            "bad_out": "out", "heads": "num_heads"}[change]  # fmt: skip
    if change == "int64_lens":
        args["context_lens"] = args["context_lens"].long()
    elif change == "device_lens_shape":
        args["context_lens"] = torch.tensor([4], dtype=torch.int32)
    elif change == "int64_table":
        args["block_table"] = table.long()
    elif change == "bad_out":
        args["out"] = torch.empty_like(q, dtype=torch.float16)
    else:
        args["num_heads"] = 3
    with pytest.raises(RuntimeError, match=name):
        atb_paged(q, k_cache, v_cache, **args)


def test_adapter_uses_each_kernel(monkeypatch):
    """Plain decode goes to _npu_paged_attention, a windowed decode and an extend to FIA v2."""
    seen = []
    ops = EMULATED.ops
    for name in ("_npu_paged_attention", "npu_fused_infer_attention_score_v2"):
        op = getattr(ops, name)
        monkeypatch.setattr(ops, name, lambda *a, _op=op, _n=name, **k: (seen.append(_n), _op(*a, **k))[1])
    for q_lens, kv_lens, window in (([1, 1], [6, 4], None), ([1, 1], [6, 4], 2), ([2, 1], [6, 4], None)):
        q, k_cache, v_cache, meta = _batch(q_lens, kv_lens, 2)
        args = dict(meta, sliding_window=window, softcap=None, sinks=None, scale=SCALE)
        actual = EMULATED.paged_attention(q, k_cache, v_cache, **args)
        assert_close(actual, serving.paged_attention(q, k_cache, v_cache, **args), clause="SERVE",
                     family="attention", context=f"{q_lens} W={window}", dtype=torch.float32)  # fmt: skip
    assert seen == ["_npu_paged_attention", *["npu_fused_infer_attention_score_v2"] * 2]
