"""The emulated KV-cache write ops (backends/npu_emulator/kv_cache.py) against spec/ascend.md,
CANN-KV-WRITE: the Norm and PA_NZ layouts, the documented restrictions, npu_scatter_nd_update_."""

from __future__ import annotations

import pytest
import torch

from backends.npu_emulator import kv_cache as emu


def _norm_case(dtype=torch.float16, dk=4, dv=6):
    key, value = torch.randn(3, 2, dk).to(dtype), torch.randn(3, 2, dv).to(dtype)
    return key, value, torch.zeros(4, 8, 2, dk, dtype=dtype), torch.zeros(4, 8, 2, dv, dtype=dtype)


def test_norm_mode_writes_each_token_at_its_slot():
    key, value, kc, vc = _norm_case()
    emu.npu_scatter_pa_kv_cache(
        key, value, kc, vc, torch.tensor([9, 0, 31], dtype=torch.int32), cache_mode="Norm"
    )
    for t, s in enumerate((9, 0, 31)):
        assert torch.equal(kc[s // 8, s % 8], key[t]) and torch.equal(vc[s // 8, s % 8], value[t])
    assert int((kc != 0).any(-1).any(-1).sum()) == 3


def test_pa_nz_mode_splits_each_token_into_32_byte_chunks():
    key, value = torch.randn(2, 2, 16).half(), torch.randn(2, 2, 16).half()
    kc, vc = torch.zeros(3, 2, 8, 16, dtype=torch.half), torch.zeros(3, 2, 8, 16, dtype=torch.half)
    emu.npu_scatter_pa_kv_cache(key, value, kc, vc, torch.tensor([5, 17]))  # the default: PA_NZ
    assert torch.equal(kc[0, :, 5], key[0].reshape(2, 16)) and torch.equal(
        vc[2, :, 1], value[1].reshape(2, 16)
    )


@pytest.mark.parametrize(
    "slots, words",
    [([0, -1, 3], r"\[0, 31\]"), ([0, 32, 3], r"\[0, 31\]"), ([2, 2, 3], "unique")],
)
def test_slots_out_of_range_or_repeated_raise(slots, words):
    key, value, kc, vc = _norm_case()
    with pytest.raises(ValueError, match=words):
        emu.npu_scatter_pa_kv_cache(key, value, kc, vc, torch.tensor(slots), cache_mode="Norm")


def test_the_default_mode_rejects_nd_caches_and_views_are_rejected():
    key, value, kc, vc = _norm_case()
    with pytest.raises(ValueError, match="PA_NZ"):
        emu.npu_scatter_pa_kv_cache(key, value, kc, vc, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="non-contiguous"):
        emu.npu_scatter_pa_kv_cache(
            key, value, kc.transpose(1, 2), vc, torch.tensor([0, 1, 2]), cache_mode="Norm"
        )
    with pytest.raises(TypeError, match="key's dtype"):
        emu.npu_scatter_pa_kv_cache(key, value.float(), kc, vc, torch.tensor([0, 1, 2]), cache_mode="Norm")


def test_scatter_nd_update_writes_rows_and_rejects_negative_indices():
    target = torch.zeros(5, 2, 3)
    rows = torch.randn(2, 2, 3)
    emu.npu_scatter_nd_update_(target, torch.tensor([[4], [1]]), rows)
    assert torch.equal(target[4], rows[0]) and torch.equal(target[1], rows[1]) and not target[0].any()
    with pytest.raises(ValueError, match="must lie in"):
        emu.npu_scatter_nd_update_(target, torch.tensor([[-1]]), rows[:1])


def test_reshape_and_cache_takes_int32_slots_and_half_dtypes_only():
    """ATB ReshapeAndCache: int32 slots, float16/bfloat16/int8 for all four tensors, ND."""
    key, value, kc, vc = _norm_case(torch.bfloat16)
    emu._npu_reshape_and_cache(key, value, kc, vc, torch.tensor([3, 8, 1], dtype=torch.int32))
    assert torch.equal(kc[1, 0], key[1]) and torch.equal(vc[0, 3], value[0])
    with pytest.raises(TypeError, match="int32"):
        emu._npu_reshape_and_cache(key, value, kc, vc, torch.tensor([3, 8, 1]))
    with pytest.raises(TypeError, match="dtype"):
        emu._npu_reshape_and_cache(
            key.float(), value.float(), kc.float(), vc.float(), torch.tensor([3], dtype=torch.int32)
        )


def test_the_adapter_takes_atb_for_int32_slots_and_scatter_pa_otherwise(monkeypatch):
    """The adapter's op choice (spec/ascend.md, CANN-KV-WRITE): int32 slots and bfloat16 rows go to
    _npu_reshape_and_cache, int64 slots to npu_scatter_pa_kv_cache; both write the same bits."""
    import backends.npu_emulator as ops
    from backends.npu import EMULATED

    called = []
    for name in ("_npu_reshape_and_cache", "npu_scatter_pa_kv_cache"):
        original = getattr(ops, name)
        monkeypatch.setattr(ops, name, lambda *a, _f=original, _n=name, **k: called.append(_n) or _f(*a, **k))
    results = []
    for dtype in (torch.int32, torch.int64):
        torch.manual_seed(0)  # the same rows both times
        key, value, kc, vc = _norm_case(torch.bfloat16)
        EMULATED.write_kv_cache(key, value, kc, vc, torch.tensor([3, -1, 9], dtype=dtype))
        results.append((kc, vc))
    assert called == ["_npu_reshape_and_cache", "npu_scatter_pa_kv_cache"]
    assert all(torch.equal(a, b) for a, b in zip(results[0], results[1], strict=True))
