"""The KV-cache bench cases (spec/kv_cache.md): the write and the fp8 read. Seeded inputs.

- Write: 8192 tokens (a prefill chunk) into a 32k-token pool (256 blocks of 128), Hkv 8, D 128, at
  slots of a seeded permutation of the pool (prefix caching leaves holes: 1 token in 16 is padding,
  slot -1), key and value in the bench dtype, the caches too.
- fp8 read: the serving decode shape (``benchmarks/serving_cases.py``: 64 sequences over the 32k
  pool) with float8_e4m3fn caches and per-tensor float32 scales (amax / 448), q in the bench dtype.
"""

from __future__ import annotations

import torch

from benchmarks.case_types import GIB, Case, Target
from benchmarks.serving_cases import _SERVE_DECODE, _SERVE_TARGET, serving_decode

__all__ = ["KV_CACHE_CASES", "fp8_decode", "kv_write"]


def kv_write(p, device, dtype):
    """write_kv_cache's arguments: p["tokens"] tokens into p["blocks"] x p["block_size"] slots."""
    generator = torch.Generator().manual_seed(1234)
    pool = p["blocks"] * p["block_size"]
    shape = (p["tokens"], p["kv_heads"], p["head_dim"])
    key, value = (torch.randn(*shape, generator=generator).to(device, dtype) for _ in range(2))
    cache_shape = (p["blocks"], p["block_size"], p["kv_heads"], p["head_dim"])
    caches = [torch.zeros(cache_shape, dtype=dtype, device=device) for _ in range(2)]
    slots = torch.randperm(pool, generator=generator)[: p["tokens"]]
    slots[:: p["pad_every"]] = -1
    return (key, value, *caches, slots.to(device)), {"k_scale": None, "v_scale": None}


def fp8_decode(p, device, dtype):
    """The serving decode call with its caches quantized to float8_e4m3fn (KV-FP8) and their scales."""
    from reference.kv_cache import FP8_MAX, quantize

    (q, k_cache, v_cache), kwargs = serving_decode(p, device, dtype)
    fp8 = torch.float8_e4m3fn
    out, scales = [], []
    for cache in (k_cache, v_cache):
        scale = (cache.abs().amax().float() / FP8_MAX[fp8]).reshape(1)
        out.append(quantize(cache, scale.expand(cache.shape[2]), fp8))
        scales.append(scale)
    return (q, *out), {**kwargs, "k_scale": scales[0], "v_scale": scales[1]}


_QUICK = {"q_heads": 4, "kv_heads": 2, "head_dim": 16, "block_size": 4, "window": None}

KV_CACHE_CASES: tuple[Case, ...] = (
    Case(
        "write_kv_cache/write-8192-into-32k-page128",
        "write_kv_cache",
        "kv_cache",
        "KV-cache write: 8192 tokens (1 in 16 padded) into a 32k-token pool (256 blocks of 128), "
        "Hkv=8, D=128",
        {"tokens": 8192, "blocks": 256, "block_size": 128, "kv_heads": 8, "head_dim": 128, "pad_every": 16},
        kv_write,
        target=Target(seconds=10.0, peak_bytes=2 * GIB),
        quick_params={
            "tokens": 24,
            "blocks": 8,
            "block_size": 4,
            "kv_heads": 2,
            "head_dim": 16,
            "pad_every": 5,
        },
    ),
    Case(
        "paged_attention/decode-b64-32k-page128-fp8",
        "paged_attention",
        "serving",
        "Serving decode over float8_e4m3fn caches with per-tensor scales: 64 sequences x 1 query over "
        "a 32k-token paged pool (256 blocks of 128), Hq=32, Hkv=8, D=128",
        _SERVE_DECODE,
        fp8_decode,
        target=_SERVE_TARGET,
        quick_params={**_QUICK, "batch": 4, "blocks": 16},
    ),
)
