"""The pool-read bench cases (spec/serving.md SERVE, spec/kv_cache.md KV-FP8-READ): the same keys read
from a pool just large enough to hold them and from a 1M-slot pool, in the bench dtype and fp8.

8 sequences x 1 query (decode), each reading 4096 keys: its 32 blocks of 128 drawn (seeded, without
repetition) from the pool. The pool holds 32768 slots (256 blocks: exactly the keys read) or
1048576 (8192 blocks, 1M slots, a real serving pool); Hq 32, Hkv 8, D 128 (the serving cases'
shard). fp8 caches are float8_e4m3fn at a fixed per-tensor scale of 5 / 448 (a randn pool's
amax is about 5.7 at 1M slots x 1024: the rare larger values saturate, KV-FP8-SATURATE), filled a
chunk at a time so building a 1M-slot pool never holds it in float32. The 1M-slot cases carry a
relative target: the oracle's read must cost what the keys read cost, at most 1.5x the time and
the peak memory of the small pool's case (issue 37).
"""

from __future__ import annotations

import torch

from benchmarks.case_types import Case, RelativeTarget
from benchmarks.serving_cases import _serving_call

__all__ = ["POOL_READ_CASES", "pool_read"]

FP8_SCALE = 5.0 / 448
_CHUNK_BLOCKS = 256  # blocks generated at once while filling a pool (128 MiB of float32 at 8 x 128)


def _filled_pool(p, device, dtype, generator) -> torch.Tensor:
    """A [blocks, block_size, Hkv, D] cache of seeded normal values, in ``dtype`` or quantized to fp8."""
    fp8 = torch.float8_e4m3fn if p["fp8"] else None
    shape = (p["block_size"], p["kv_heads"], p["head_dim"])
    pool = torch.empty(p["blocks"], *shape, dtype=fp8 or dtype, device=device)
    for start in range(0, p["blocks"], _CHUNK_BLOCKS):
        rows = torch.randn(min(_CHUNK_BLOCKS, p["blocks"] - start), *shape, generator=generator)
        if fp8 is not None:
            from reference.kv_cache import quantize

            rows = quantize(rows, torch.full((p["kv_heads"],), FP8_SCALE), fp8)
        pool[start : start + rows.shape[0]] = rows.to(device, pool.dtype)
    return pool


def pool_read(p, device, dtype):
    """paged_attention's arguments: p["batch"] decode queries, each over p["keys"] keys in blocks
    drawn from a pool of p["blocks"] blocks (k_scale / v_scale for fp8 caches)."""
    generator = torch.Generator().manual_seed(1234)
    per_sequence = -(-p["keys"] // p["block_size"])
    chosen = torch.randperm(p["blocks"], generator=generator)[: p["batch"] * per_sequence]
    table = chosen.reshape(p["batch"], per_sequence).to(device, torch.int32)
    k_cache, v_cache = (_filled_pool(p, device, dtype, generator) for _ in range(2))
    batch = p["batch"]
    args, kwargs = _serving_call(p, device, dtype, k_cache, v_cache, table, [1] * batch, [p["keys"]] * batch)
    if p["fp8"]:
        kwargs["k_scale"] = kwargs["v_scale"] = torch.tensor([FP8_SCALE], device=device)
    return args, kwargs


_READ = {"batch": 8, "keys": 4096, "q_heads": 32, "kv_heads": 8, "head_dim": 128, "block_size": 128,
         "window": None}  # fmt: skip
_QUICK = {
    "batch": 2,
    "keys": 12,
    "q_heads": 4,
    "kv_heads": 2,
    "head_dim": 16,
    "block_size": 4,
    "window": None,
}
_SMALL, _LARGE = 256, 8192  # blocks of 128: the keys read exactly, and 1M slots


def _pair(fp8: bool) -> tuple[Case, Case]:
    """The small pool's case and the 1M-slot pool's, whose relative target is the small one."""
    suffix, kind = (
        ("-fp8", "float8_e4m3fn caches, per-tensor scale") if fp8 else ("", "caches in the bench dtype")
    )
    small = Case(
        f"paged_attention/read-8x4096-pool32k{suffix}",
        "paged_attention",
        "serving",
        f"Paged read baseline: 8 decode queries x 4096 keys from a pool just holding them (256 blocks of "
        f"128), {kind}, Hq=32, Hkv=8, D=128",
        {**_READ, "blocks": _SMALL, "fp8": fp8},
        pool_read,
        quick_params={**_QUICK, "blocks": 6, "fp8": fp8},
    )
    large = Case(
        f"paged_attention/target-read-8x4096-pool1M{suffix}",
        "paged_attention",
        "serving",
        f"Paged read at a real pool size: the same 8 x 4096 keys from a 1M-slot pool (8192 blocks of "
        f"128), {kind}; target <= 1.5x the time and peak memory of {small.id}",
        {**_READ, "blocks": _LARGE, "fp8": fp8},
        pool_read,
        relative_target=RelativeTarget(baseline=small.id, ratio=1.5),
        quick_params={**_QUICK, "blocks": 192, "fp8": fp8},
    )
    return small, large


POOL_READ_CASES: tuple[Case, ...] = (*_pair(False), *_pair(True))
