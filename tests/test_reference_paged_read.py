"""The serving oracle's paged read (spec/serving.md SERVE, spec/kv_cache.md KV-FP8-READ): gathering and
dequantizing only the blocks a sequence reads gives, bit for bit, the whole-pool formulation (the pool
upcast or dequantized to float64 first), and what the call allocates does not grow with the pool."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from reference import kv_cache, serving
from tests.test_reference_serving import make_case

CACHE_DTYPES = (torch.float64, torch.float32, torch.bfloat16, *kv_cache.FP8_DTYPES)


def _random_call(seed: int, cache_dtype: torch.dtype, *, hnd: bool) -> dict:
    """A small random paged batch (make_case: permuted blocks, spare blocks, -1 and foreign table
    padding) with caches of ``cache_dtype``, HND views when ``hnd``, and scales for fp8 caches."""
    gen = torch.Generator().manual_seed(seed)
    draw = lambda n: int(torch.randint(n, (), generator=gen))  # noqa: E731
    hkv, group = 1 + draw(3), 1 + draw(3)
    seqs = [(lambda length: (length, 1 + draw(length)))(1 + draw(20)) for _ in range(1 + draw(4))]
    call = make_case(seqs, block_size=1 + draw(5), hq=hkv * group, hkv=hkv, dqk=1 + draw(8),
                     dv=1 + draw(8), shared=draw(2), spare=1 + draw(4), seed=seed)  # fmt: skip
    if kv_cache.is_fp8(cache_dtype):
        scale_shape = ((), (1,), (hkv,))[draw(3)]
        for name in ("k", "v"):
            scale = (torch.rand(scale_shape, generator=gen) + 0.05).float()
            cache = call[f"{name}_cache"] * 40  # KV-FP8's write: a part saturates
            call[f"{name}_cache"] = kv_cache.quantize(cache, scale.reshape(-1).expand(hkv), cache_dtype)
            call[f"{name}_scale"] = scale
    else:
        call["q"] = call["q"].to(cache_dtype)
        call["k_cache"], call["v_cache"] = call["k_cache"].to(cache_dtype), call["v_cache"].to(cache_dtype)
    if hnd:  # the cache stored [num_blocks, Hkv, bs, D], passed as its NHD view (SERVE-LAYOUT)
        for name in ("k_cache", "v_cache"):
            call[name] = call[name].transpose(1, 2).contiguous().transpose(1, 2)
    window = (None, 1, 3, 50)[draw(4)]
    sinks = torch.randn(hkv * group, generator=gen, dtype=torch.float64) if draw(2) else None
    return dict(call, sliding_window=window, softcap=(None, 1.5)[draw(2)], sinks=sinks, scale=0.4)


def _whole_pool(call: dict) -> torch.Tensor:
    """The formulation before the gather: the whole pool dequantized (fp8) or upcast to float64, then read."""
    call = dict(call)
    scales = [call.pop("k_scale", None), call.pop("v_scale", None)]
    for name, scale in zip(("k_cache", "v_cache"), scales, strict=True):
        cache = call[name]
        call[name] = (
            cache.double()
            if scale is None
            else kv_cache.dequantize(cache, scale.reshape(-1).expand(cache.shape[2]))
        )
    return serving.paged_attention(**dict(call, q=call["q"].double()))


@pytest.mark.parametrize("hnd", [False, True], ids=["NHD", "HND"])
@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES, ids=str)
@pytest.mark.parametrize("seed", range(6))
def test_gathered_read_equals_the_whole_pool_read(seed, cache_dtype, hnd):
    """SERVE / KV-FP8-READ: the per-sequence gather gives the whole-pool read's output bit for bit."""
    call = _random_call(seed, cache_dtype, hnd=hnd)
    read = {int(i) for b, length in enumerate(call["seq_lens"].tolist())
            for i in call["block_table"][b, : -(-length // call["k_cache"].shape[1])]}  # fmt: skip
    spare = min(set(range(call["k_cache"].shape[0])) - read)
    call["k_cache"][spare] = float("nan")  # a block no sequence reads: stale data never reaches out
    got, want = serving.paged_attention(**call), _whole_pool(call)
    assert got.dtype == torch.float64 and not got.isnan().any()
    torch.testing.assert_close(got, want, rtol=0, atol=0)


class _LargestAllocation(TorchDispatchMode):
    """The largest storage (bytes) any op makes anew while active: views and in-place results,
    which share an input's storage, are not allocations."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


def _largest_allocation(call: dict, extra_blocks: int) -> int:
    """The most the oracle allocates at once for ``call`` with ``extra_blocks`` unread blocks added."""
    call = dict(call)
    for name in ("k_cache", "v_cache"):
        cache = call[name]
        pad = torch.zeros(extra_blocks, *cache.shape[1:], dtype=torch.float32).to(cache.dtype)
        call[name] = torch.cat([cache, pad])
    with _LargestAllocation() as recorder:
        serving.paged_attention(**call)
    return recorder.largest


@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES, ids=str)
def test_read_allocates_for_the_keys_read_not_the_pool(cache_dtype):
    """SERVE: a pool 64x larger (unread blocks) makes the call allocate nothing larger: the read costs
    the keys read, fp8 or not (the whole-pool dequantization allocated 8 bytes per pool element)."""
    call = _random_call(3, cache_dtype, hnd=False)
    pool = call["k_cache"].shape[0]
    assert _largest_allocation(call, 63 * pool) == _largest_allocation(call, 0) > 0


def test_fp8_key_cache_without_a_value_cache_is_named():
    """KV-FP8-READ / SERVE-ERRORS: an fp8 k_cache with v_cache None is one ValueError naming v_cache."""
    call = _random_call(0, torch.float8_e4m3fn, hnd=False)
    with pytest.raises(
        ValueError, match="v_cache must have k_cache's dtype torch.float8_e4m3fn, got NoneType"
    ):
        serving.paged_attention(**dict(call, v_cache=None))
