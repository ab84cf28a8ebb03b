"""The KV-cache write oracle (reference/kv_cache.py) against a per-token write written from
spec/kv_cache.md: each token's slot s at (s // bs, s % bs), negative slots skipped, and fp8 values
chosen by enumerating every fp8 bit pattern (nearest, ties to the even significand, saturated to
the format's finite maximum, the sign kept)."""

from __future__ import annotations

import pytest
import torch

from conformance.bad_input.kv_cache import ERRORS
from reference import kv_cache as oracle
from reference import serving


def _fp8_table(dtype):
    """Every finite fp8 value as (value, bit pattern)."""
    bits = torch.arange(256, dtype=torch.uint8)
    values = bits.view(dtype).to(torch.float64)
    return [(v, b) for v, b in zip(values.tolist(), bits.tolist(), strict=True) if v == v]


TABLES = {dtype: _fp8_table(dtype) for dtype in oracle.FP8_DTYPES}


def brute_fp8(v: float, dtype) -> int:
    """KV-FP8 for one float32 quotient v: the bit pattern of the nearest finite fp8 value after
    clamping to +-max, ties to an even significand (pattern LSB 0), a zero keeping v's sign where
    the format has -0."""
    limit = max(value for value, _ in TABLES[dtype])
    v = max(-limit, min(limit, v))
    negative = v < 0 or (v == 0 and str(v).startswith("-"))

    def rank(entry):
        value, pattern = entry
        sign_differs = (value < 0 or (value == 0 and pattern & 0x80 == 0x80)) != negative
        return (abs(value - v), pattern & 1, sign_differs)

    return min(TABLES[dtype], key=rank)[1]


def brute_write(key, value, k_cache, v_cache, slots, k_scale=None, v_scale=None):
    """The spec's write, one token and one element at a time (on copies), as raw bytes."""
    k_cache, v_cache = k_cache.clone(), None if v_cache is None else v_cache.clone()
    for t, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        pairs = [(k_cache, key, k_scale)] + ([(v_cache, value, v_scale)] if value is not None else [])
        for cache, source, scale in pairs:
            block, offset = s // cache.shape[1], s % cache.shape[1]
            if scale is None:
                cache[block, offset] = source[t]
                continue
            raw = cache[block, offset].view(torch.uint8)
            for h in range(source.shape[1]):
                quotient = source[t, h].to(torch.float32) / scale[h]  # fl32(x / scale)
                for d in range(source.shape[2]):
                    raw[h, d] = brute_fp8(float(quotient[d]), cache.dtype)
    return k_cache, v_cache


def _bits(t):
    return None if t is None else t.contiguous().view(torch.uint8)


def _case(seed, *, tokens=7, heads=2, dk=4, dv=3, block_size=4, blocks=8, dtype=torch.float32, cache=None):
    gen = torch.Generator().manual_seed(seed)
    key = torch.randn(tokens, heads, dk, generator=gen).to(dtype) * 3
    value = torch.randn(tokens, heads, dv, generator=gen).to(dtype) * 3
    slots = torch.randperm(blocks * block_size, generator=gen)[:tokens]
    slots[torch.rand(tokens, generator=gen) < 0.3] = -1
    cache_dtype = cache or dtype
    k_cache = torch.randn(blocks, block_size, heads, dk, generator=gen).to(cache_dtype)
    v_cache = torch.randn(blocks, block_size, heads, dv, generator=gen).to(cache_dtype)
    return key, value, k_cache, v_cache, slots


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("seed", range(4))
def test_oracle_equals_the_per_token_write(seed, dtype):
    key, value, k_cache, v_cache, slots = _case(seed, dtype=dtype, block_size=(1, 3, 4, 16)[seed])
    key[0, 0, 0] = float("nan")
    want_k, want_v = brute_write(key, value, k_cache, v_cache, slots)
    oracle.write_kv_cache(key, value, k_cache, v_cache, slots)
    assert torch.equal(_bits(k_cache), _bits(want_k)) and torch.equal(_bits(v_cache), _bits(want_v))


@pytest.mark.parametrize("dtype", oracle.FP8_DTYPES)
@pytest.mark.parametrize("per_head", [False, True])
def test_fp8_oracle_equals_the_enumerated_rounding(dtype, per_head):
    """Random quotients, exact midpoints between fp8 neighbours, saturation, zeros and subnormals."""
    key, value, k_cache, v_cache, slots = _case(3, heads=2, dk=16, dv=16, cache=dtype)
    scale = torch.tensor([0.5, 0.03125] if per_head else [0.75], dtype=torch.float32)
    per = scale.expand(2)
    finite = sorted({v for v, _ in TABLES[dtype]})
    mids = [(a + b) / 2 for a, b in zip(finite, finite[1:], strict=False)]
    special = mids[:: max(1, len(mids) // 12)][:12] + [1e6, -1e6, 300.0, 247.0, 248.0, -0.0, 1e-9, -1e-9]
    rows = torch.tensor(special[:16] + [0.0] * (16 - len(special[:16])), dtype=torch.float64)
    key[0, 0], key[0, 1] = (rows * per[0]).float(), (rows * per[1]).float()
    want_k, want_v = brute_write(key, value, k_cache, v_cache, slots, per, per)
    oracle.write_kv_cache(key, value, k_cache, v_cache, slots, k_scale=scale, v_scale=scale)
    assert torch.equal(_bits(k_cache), _bits(want_k)) and torch.equal(_bits(v_cache), _bits(want_v))


def test_key_only_and_views():
    """KV-KEY-ONLY leaves no value cache; an HND view and a combined buffer are written through strides."""
    key, value, k_cache, v_cache, slots = _case(5, dk=3, dv=3)
    want_k, _ = brute_write(key, None, k_cache, None, slots)
    hnd = k_cache.transpose(1, 2).contiguous().transpose(1, 2)
    oracle.write_kv_cache(key, None, hnd, None, slots)
    assert torch.equal(hnd, want_k)
    buffer = torch.stack([k_cache, v_cache], dim=1)
    before = buffer.clone()
    want_k, want_v = brute_write(key, value, k_cache, v_cache, slots)
    oracle.write_kv_cache(key, value, buffer[:, 0], buffer[:, 1], slots)
    assert torch.equal(buffer[:, 0], want_k) and torch.equal(buffer[:, 1], want_v)
    assert not torch.equal(buffer, before)


def test_large_slot_numbers_are_not_truncated():
    """KV-LARGE on the oracle: a 2^31 + 2^12-slot fp8 cache, written past 2^31 (memory never touched)."""
    slots_total = (1 << 31) + (1 << 12)
    cache = torch.empty(slots_total // 64, 64, 1, 1, dtype=torch.float8_e4m3fn)
    slots = torch.tensor([(1 << 31) + 5, 7, -1], dtype=torch.int64)
    key = torch.tensor([[[2.0]], [[3.0]], [[5.0]]])
    oracle.write_kv_cache(key, None, cache, None, slots, k_scale=torch.tensor(1.0))
    flat = cache.view(-1)
    assert flat[(1 << 31) + 5].float() == 2.0 and flat[7].float() == 3.0


def test_dequantized_read_is_exact():
    """KV-FP8-READ: the oracle's paged_attention on fp8 caches equals it on value * scale in float64."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, 2, 8, generator=gen)
    k = torch.randn(4, 2, 1, 8, generator=gen).to(torch.float8_e4m3fn)
    v = torch.randn(4, 2, 1, 8, generator=gen).to(torch.float8_e4m3fn)
    scale = torch.tensor([0.37])
    meta = dict(block_table=torch.tensor([[0, 1], [2, 3]]), cu_seqlens_q=torch.tensor([0, 1, 3]),
                seq_lens=torch.tensor([3, 4]), sliding_window=None, softcap=None, sinks=None,
                scale=0.3)  # fmt: skip
    got = serving.paged_attention(q, k, v, **meta, k_scale=scale, v_scale=scale)
    kd, vd = (t.double() * scale.double() for t in (k.float(), v.float()))  # the float32 scale, exactly
    want = serving.paged_attention(q.double(), kd, vd, **meta)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", ERRORS, ids=lambda c: c.id)
def test_oracle_rejects_bad_input(case):
    """KV-ERRORS: every shared record raises its exception, naming the argument."""
    with pytest.raises(case.exception, match=case.match):
        case.call(oracle if case.op == "write_kv_cache" else serving)
