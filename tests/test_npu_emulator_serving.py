"""FIA's paged TND and BSND paths in the emulator follow the documented semantics (spec/ascend.md,
CANN-FIA-PAGED, CANN-FIA-DECODE), and the Ascend adapter's paged_attention matches the serving oracle
(spec/serving.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.npu import EMULATED
from backends.npu_emulator import npu_fused_infer_attention_score as fia
from conformance.checks import assert_close
from reference import attention, serving

COMPRESSED = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
HQ, HKV, D, SCALE = 4, 2, 8, 0.3


def _paged(lengths, block_size, num_blocks=24, seed=0):
    """A cache [num_blocks, block_size, HKV * D] whose sequences own randomly chosen blocks, and the
    dense keys/values [L, HKV, D] of each sequence; every block no sequence reads is NaN."""
    gen = torch.Generator().manual_seed(seed)
    key = torch.full((num_blocks, block_size, HKV * D), float("nan"))
    value = torch.full((num_blocks, block_size, HKV * D), float("nan"))
    order = torch.randperm(num_blocks, generator=gen).tolist()
    width = max(-(-n // block_size) for n in lengths) + 1
    table = torch.full((len(lengths), width), 10_000, dtype=torch.int32)  # unread entries: foreign ids
    dense = []
    for b, n in enumerate(lengths):
        k, v = torch.randn(n, HKV, D, generator=gen), torch.randn(n, HKV, D, generator=gen)
        for i in range(-(-n // block_size)):
            block, rows = order.pop(), slice(i * block_size, min(n, (i + 1) * block_size))
            table[b, i] = block
            key[block, : rows.stop - rows.start] = k[rows].flatten(1)
            value[block, : rows.stop - rows.start] = v[rows].flatten(1)
        dense.append((k, v))
    return key, value, table, dense


def _expected(q_rows, k, v, allowed):
    """The dense float64 oracle (reference.attention) for one sequence: [n, HQ, D]."""
    q4, k4, v4 = q_rows.permute(1, 0, 2)[None], k.permute(1, 0, 2)[None], v.permute(1, 0, 2)[None]
    return attention.attention(q4, k4, v4, allowed=allowed, scale=SCALE)[0].permute(1, 0, 2).float()


def _run(q, key, value, table, q_lens, kv_lens, **options):
    ends = torch.tensor(q_lens).cumsum(0).tolist()
    return fia(q, key, value, input_layout="TND", num_heads=HQ, num_key_value_heads=HKV, scale=SCALE,
               block_table=table, block_size=key.shape[1], actual_seq_lengths=ends,
               actual_seq_lengths_kv=kv_lens, **options)[0]  # fmt: skip


def _check_rows(out, q, dense, q_lens, allowed_of):
    """Each sequence's rows (cumulative TND packing) equal the oracle under allowed_of(b, n, L)."""
    start = 0
    for b, ((k, v), n) in enumerate(zip(dense, q_lens, strict=True)):
        want = _expected(q[start : start + n], k, v, allowed_of(b, n, k.shape[0]))
        torch.testing.assert_close(out[start : start + n], want, rtol=1e-5, atol=1e-5)
        start += n


def _bottom_right(n, length, pre=None):
    i = torch.arange(n)[:, None] + length - n
    j = torch.arange(length)[None, :]
    return (j <= i) if pre is None else (j <= i) & (j >= i - pre)


def test_paged_tnd_causal_reads_the_permuted_table():
    """sparse_mode 3: causal from each sequence's bottom-right; blocks come from the table, in any
    order, and NaN in every unread block and tail slot never reaches the output."""
    q_lens, kv_lens = [3, 1, 4], [7, 5, 4]
    key, value, table, dense = _paged(kv_lens, block_size=3)
    q = torch.randn(sum(q_lens), HQ, D)
    out = _run(q, key, value, table, q_lens, kv_lens, sparse_mode=3, atten_mask=COMPRESSED)
    assert torch.isfinite(out).all()
    _check_rows(out, q, dense, q_lens, lambda b, n, L: _bottom_right(n, L))


def test_band_is_bottom_right_per_sequence():
    """sparse_mode 4 keeps i + d_b - pre <= j <= i + d_b with d_b = kv_len_b - q_len_b per sequence."""
    q_lens, kv_lens = [2, 3], [9, 3]
    key, value, table, dense = _paged(kv_lens, block_size=4)
    q = torch.randn(sum(q_lens), HQ, D)
    out = _run(q, key, value, table, q_lens, kv_lens, sparse_mode=4, atten_mask=COMPRESSED,
               pre_tokens=2, next_tokens=0)  # fmt: skip
    _check_rows(out, q, dense, q_lens, lambda b, n, L: _bottom_right(n, L, pre=2))


def test_tnd_decode_keeps_the_band():
    """TND is outside the query-length-1 caveat: a call whose every sequence has one query row keeps
    sparse_mode 4's band, as one among multi-token ones does; an explicit mask there raises."""
    kv_lens = [6, 4]
    key, value, table, dense = _paged(kv_lens, block_size=2)
    for q_lens in ([1, 1], [1, 2]):
        q = torch.randn(sum(q_lens), HQ, D)
        out = _run(q, key, value, table, q_lens, kv_lens, sparse_mode=4, atten_mask=COMPRESSED, pre_tokens=1,
                   next_tokens=0)  # fmt: skip
        _check_rows(out, q, dense, q_lens, lambda b, n, L: _bottom_right(n, L, pre=1))
    explicit = torch.zeros(2, 1, 1, table.shape[1] * 2, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="sparse_mode 0 without a mask"):
        _run(torch.randn(2, HQ, D), key, value, table, [1, 1], kv_lens, atten_mask=explicit)


def _run_bsnd(q, key, value, table, kv_lens, **options):
    """The paged BSND decode call: query [B, 1, N, D]."""
    out = fia(q[:, None], key, value, input_layout="BSND", num_heads=HQ, num_key_value_heads=HKV,
              scale=SCALE, block_table=table, block_size=key.shape[1], actual_seq_lengths_kv=kv_lens,
              **options)  # fmt: skip
    return out[0][:, 0]


@pytest.mark.parametrize("mask_shape", ["b11s", "bs"])
def test_bsnd_decode_ignores_the_band_and_takes_the_explicit_mask(mask_shape):
    """BSND at query length 1 with QK_D = V_D (CANN-FIA-DECODE): sparse_mode 4 and pre_tokens are not
    read (every key within the length is seen), an explicit (B, 1, 1, S) or (B, S) mask applies."""
    kv_lens = [5, 3]
    key, value, table, dense = _paged(kv_lens, block_size=2)
    q = torch.randn(2, HQ, D)
    out = _run_bsnd(q, key, value, table, kv_lens, sparse_mode=4, pre_tokens=0, next_tokens=0)
    _check_rows(out, q, dense, [1, 1], lambda b, n, L: torch.ones(1, L, dtype=torch.bool))
    masked = torch.ones(2, table.shape[1] * 2, dtype=torch.bool)
    masked[0, 2:5] = False
    masked[1, 0:3] = False
    mask = masked[:, None, None, :] if mask_shape == "b11s" else masked
    out = _run_bsnd(q, key, value, table, kv_lens, atten_mask=mask)
    _check_rows(out, q, dense, [1, 1], lambda b, n, L: ~masked[b : b + 1, :L])


def test_actual_seq_lengths_are_cumulative():
    """TND takes cumulative ends: per-sequence lengths that decrease or do not end at T raise."""
    key, value, table, _ = _paged([4, 4], block_size=2)
    q = torch.randn(5, HQ, D)
    for ends in ([3, 2], [3, 4]):
        with pytest.raises(RuntimeError, match="cumulative"):
            fia(q, key, value, input_layout="TND", num_heads=HQ, num_key_value_heads=HKV, scale=SCALE,
                block_table=table, block_size=2, actual_seq_lengths=ends, actual_seq_lengths_kv=[4, 4],
                sparse_mode=3, atten_mask=COMPRESSED)  # fmt: skip


# actual_seq_lengths / actual_seq_lengths_kv as frameworks pass them (spec/ascend.md, CANN-FIA).
LENGTH_SPELLINGS = {
    "list": list,
    "tuple": tuple,
    "numpy-int64": lambda v: np.array(v, dtype=np.int64),
    "numpy-int32": lambda v: np.array(v, dtype=np.int32),
    "list-of-numpy-ints": lambda v: [np.int64(x) for x in v],
    "tensor-int32": lambda v: torch.tensor(v, dtype=torch.int32),
}


@pytest.mark.parametrize("spelling", LENGTH_SPELLINGS)
def test_lengths_take_every_int_list_spelling(spelling):
    """Python and numpy integer lists and arrays (and integer tensors) give the plain list's output."""
    q_lens, kv_lens = [3, 1, 4], [7, 5, 4]
    key, value, table, _ = _paged(kv_lens, block_size=3)
    q = torch.randn(sum(q_lens), HQ, D)
    ends = torch.tensor(q_lens).cumsum(0).tolist()
    spell = LENGTH_SPELLINGS[spelling]
    options = dict(input_layout="TND", num_heads=HQ, num_key_value_heads=HKV, scale=SCALE, block_table=table,
                   block_size=3, sparse_mode=3, atten_mask=COMPRESSED)  # fmt: skip
    want = fia(q, key, value, actual_seq_lengths=ends, actual_seq_lengths_kv=kv_lens, **options)[0]
    got = fia(q, key, value, actual_seq_lengths=spell(ends), actual_seq_lengths_kv=spell(kv_lens), **options)[
        0
    ]
    assert torch.equal(got, want)


@pytest.mark.parametrize(
    "lengths",
    [[3.0, 8.0], np.array([3.0, 8.0]), [True, 8], np.array([[3, 8]]), torch.tensor([3.0, 8.0]), "38"],
    ids=["floats", "numpy-floats", "bool", "numpy-2d", "float-tensor", "string"],
)
def test_lengths_reject_what_int_lists_do_not_hold(lengths):
    """Floats, bools, nested arrays and strings are not an int[]: RuntimeError."""
    key, value, table, _ = _paged([4, 4], block_size=2)
    q = torch.randn(8, HQ, D)
    with pytest.raises(RuntimeError, match="actual_seq_lengths"):
        fia(q, key, value, input_layout="TND", num_heads=HQ, num_key_value_heads=HKV, scale=SCALE,
            block_table=table, block_size=2, actual_seq_lengths=lengths, actual_seq_lengths_kv=[4, 4],
            sparse_mode=3, atten_mask=COMPRESSED)  # fmt: skip


@pytest.mark.parametrize(
    "change",
    ["block_size", "int64_table", "short_table", "bad_id", "no_kv_lengths", "four_d_cache", "sparse_1"],
)
def test_paged_violations_raise(change):
    """A wrong block_size, table dtype/width/ids, missing kv lengths, another cache layout or an
    undocumented TND sparse mode raise RuntimeError."""
    kv_lens = [5, 3]
    key, value, table, _ = _paged(kv_lens, block_size=2)
    q = torch.randn(4, HQ, D)
    options = dict(input_layout="TND", num_heads=HQ, num_key_value_heads=HKV, scale=SCALE, block_table=table,
                   block_size=2, actual_seq_lengths=[2, 4], actual_seq_lengths_kv=kv_lens, sparse_mode=3,
                   atten_mask=COMPRESSED)  # fmt: skip
    if change == "block_size":
        options["block_size"] = 128
    elif change == "int64_table":
        options["block_table"] = table.long()
    elif change == "short_table":
        options["block_table"] = table[:, :2]
    elif change == "bad_id":
        options["block_table"] = table.clone().index_fill_(1, torch.tensor([0]), 99)
    elif change == "no_kv_lengths":
        options["actual_seq_lengths_kv"] = None
    elif change == "four_d_cache":
        key, value = key.unflatten(2, (HKV, D)), value.unflatten(2, (HKV, D))
    else:
        options["sparse_mode"] = 1
    with pytest.raises(RuntimeError):
        fia(q, key, value, **options)


# --- the adapter against the serving oracle (spec/serving.md, SERVE) -----------------------------


def _batch(q_lens, kv_lens, block_size, seed=1):
    """Contract arguments: q [T, HQ, D], caches [nb, bs, HKV, D] with NaN in unread slots, an int64
    table padded with -1, cu_seqlens_q and seq_lens."""
    key, value, table, _ = _paged(kv_lens, block_size, seed=seed)
    table = torch.where(table == 10_000, -1, table).long()
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()])
    q = torch.randn(int(cu[-1]), HQ, D, generator=torch.Generator().manual_seed(seed + 1))
    unflat = (key.unflatten(2, (HKV, D)), value.unflatten(2, (HKV, D)))
    return q, *unflat, {"block_table": table, "cu_seqlens_q": cu, "seq_lens": torch.tensor(kv_lens)}


@pytest.mark.parametrize(
    "q_lens, kv_lens, block_size, window",
    [
        ([4, 2], [4, 9], 4, None),  # a prefill and an extend
        ([3, 1, 2], [8, 6, 2], 3, 3),  # a one-token sequence inside an extend call, windowed
        ([1, 1, 1], [7, 1, 12], 5, None),  # decode
        ([1, 1], [9, 4], 2, 3),  # decode with a window: the band, as for an extend
        ([2, 5], [11, 5], 1, 4),  # block size 1
    ],
)
def test_adapter_matches_the_serving_oracle(q_lens, kv_lens, block_size, window):
    """AscendBackend.paged_attention (emulated FIA) equals reference.serving.paged_attention."""
    q, k_cache, v_cache, meta = _batch(q_lens, kv_lens, block_size)
    args = dict(meta, sliding_window=window, softcap=None, sinks=None, scale=SCALE)
    actual = EMULATED.paged_attention(q, k_cache, v_cache, **args)
    expected = serving.paged_attention(q, k_cache, v_cache, **args)  # NaN slots: unread by both
    context = f"q_lens={q_lens} seq_lens={kv_lens} W={window}"
    assert_close(actual, expected, clause="SERVE", family="attention", context=context, dtype=torch.float32)


@pytest.mark.parametrize("feature", ["softcap", "sinks_wide_value", "head_dims"])
def test_adapter_refuses_what_fia_cannot_express(feature):
    """Softcap, sinks with a value head dim over 128 (the op takes 64 or 128; smaller ones are padded)
    and Dv != Dqk raise NotImplementedError naming the feature (CANN-FIA-V2)."""
    q, k_cache, v_cache, meta = _batch([2], [5], 2)
    args = dict(meta, sliding_window=None, softcap=None, sinks=None, scale=SCALE)
    if feature == "softcap":
        args["softcap"] = 50.0
    elif feature == "sinks_wide_value":
        args["sinks"] = torch.zeros(HQ)
        k_cache, v_cache = (c.repeat_interleave(17, -1) for c in (k_cache, v_cache))  # D = 136
        q = q.repeat_interleave(17, -1)
    else:
        v_cache = v_cache[..., : D // 2]
    with pytest.raises(NotImplementedError, match="softcap|sink|Dv"):
        EMULATED.paged_attention(q, k_cache, v_cache, **args)


@pytest.mark.parametrize("window", [None, 1, 5])
def test_window_kernel_args_keep_w_keys(window):
    """Both kernels' raw window arguments keep exactly W keys (SERVE-WINDOW-ARGS)."""
    args = EMULATED.window_kernel_args(window)
    assert serving.window_keys(args["prefill"]) == window
    assert serving.window_keys(args["decode"]) == window
