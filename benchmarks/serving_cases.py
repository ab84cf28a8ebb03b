"""The serving bench cases (spec/serving.md, SERVE) and their inputs: paged caches, block tables,
packed queries. Everything is seeded, so every implementation of a case gets the same call.

Shapes: Hq 32, Hkv 8, D 128 (the prefill target's tensor-parallel shard, ``benchmarks/cases.py``),
page (block) size 128, bf16 inputs.

- Decode: 64 sequences with one query each over a paged cache pool of 32768 tokens (256 blocks
  of 128). INTERPRETATION: the 64 lengths are spread (seeded) over 1..32768, one of them 32768,
  and all sequences share prefix blocks (prefix caching): sequence b reads the first
  ceil(L_b / 128) blocks of one chain, a seeded permutation of the pool. Also with W = 4096.
- Extend: 8 sequences, each 2048 new tokens over a 16k-token cached prefix (L_b = 18432), each
  in its own blocks, the pool's blocks permuted.
- MLA-like: the extend shape with Dqk 192, Dv 128 (DeepSeek-V2/V3's qk and v head dims) on 4
  sequences (0.6x the extend's flops), to keep a float64 run of it short.
"""

from __future__ import annotations

import math

import torch

from benchmarks.case_types import GIB, Case, Target

__all__ = ["SERVING_CASES", "serving_decode", "serving_extend"]


def _paged_cache(p, tables, device, dtype):
    """Paged k/v caches of p["blocks"] blocks of p["block_size"] tokens, and the padded block table."""
    shape = (p["blocks"], p["block_size"], p["kv_heads"])
    k_cache = torch.randn(*shape, p["head_dim"], device=device, dtype=dtype)
    v_cache = torch.randn(*shape, p.get("v_head_dim", p["head_dim"]), device=device, dtype=dtype)
    width = max(len(t) for t in tables)
    table = torch.tensor([t + [-1] * (width - len(t)) for t in tables], dtype=torch.int32, device=device)
    return k_cache, v_cache, table


def _serving_call(p, device, dtype, k_cache, v_cache, table, query_lens, lengths):
    """paged_attention's arguments: packed queries (THD) of the given lengths, scale 1/sqrt(Dqk)."""
    q = torch.randn(sum(query_lens), p["q_heads"], p["head_dim"], device=device, dtype=dtype)
    starts = torch.tensor([0, *query_lens], dtype=torch.int32).cumsum(0, dtype=torch.int32).to(device)
    kwargs = {
        "block_table": table,
        "cu_seqlens_q": starts,
        "seq_lens": torch.tensor(lengths, dtype=torch.int32, device=device),
        "sliding_window": p["window"],
        "softcap": None,
        "sinks": None,
        "scale": 1 / math.sqrt(p["head_dim"]),
    }
    return (q, k_cache, v_cache), kwargs


def serving_decode(p, device, dtype):
    """One query per sequence; lengths spread over the pool, prefixes of one permuted block chain."""
    generator = torch.Generator().manual_seed(1234)
    pool = p["blocks"] * p["block_size"]
    lengths = torch.randint(1, pool + 1, (p["batch"],), generator=generator).tolist()
    lengths[0] = pool
    chain = torch.randperm(p["blocks"], generator=generator).tolist()
    tables = [chain[: -(-length // p["block_size"])] for length in lengths]
    k_cache, v_cache, table = _paged_cache(p, tables, device, dtype)
    return _serving_call(p, device, dtype, k_cache, v_cache, table, [1] * p["batch"], lengths)


def serving_extend(p, device, dtype):
    """p["new"] queries per sequence over a p["prefix"]-token cached prefix, own blocks, permuted."""
    generator = torch.Generator().manual_seed(1234)
    length = p["prefix"] + p["new"]
    per_sequence = -(-length // p["block_size"])
    order = torch.randperm(p["batch"] * per_sequence, generator=generator).tolist()
    tables = [order[b * per_sequence : (b + 1) * per_sequence] for b in range(p["batch"])]
    p = {**p, "blocks": p["batch"] * per_sequence}
    k_cache, v_cache, table = _paged_cache(p, tables, device, dtype)
    batch = p["batch"]
    return _serving_call(p, device, dtype, k_cache, v_cache, table, [p["new"]] * batch, [length] * batch)


_SERVE = {"q_heads": 32, "kv_heads": 8, "head_dim": 128, "block_size": 128, "window": None}
_SERVE_DECODE = {**_SERVE, "batch": 64, "blocks": 256}
_SERVE_EXTEND = {**_SERVE, "batch": 8, "prefix": 16384, "new": 2048}
_QUICK_SERVE = {"q_heads": 4, "kv_heads": 2, "head_dim": 16, "block_size": 4, "window": None}
_SERVE_TARGET = Target(seconds=30.0, peak_bytes=4 * GIB)

SERVING_CASES: tuple[Case, ...] = (
    Case(
        "paged_attention/decode-b64-32k-page128",
        "paged_attention",
        "serving",
        "Serving decode: 64 sequences x 1 query over a 32k-token paged pool (256 blocks of 128), "
        "shared prefix blocks, Hq=32, Hkv=8, D=128",
        _SERVE_DECODE,
        serving_decode,
        target=_SERVE_TARGET,
        quick_params={**_QUICK_SERVE, "batch": 4, "blocks": 16},
    ),
    Case(
        "paged_attention/decode-b64-32k-page128-w4096",
        "paged_attention",
        "serving",
        "Serving decode as above on a sliding layer, W=4096",
        {**_SERVE_DECODE, "window": 4096},
        serving_decode,
        target=_SERVE_TARGET,
        quick_params={**_QUICK_SERVE, "batch": 4, "blocks": 16, "window": 8},
    ),
    Case(
        "paged_attention/extend-b8-2048-over-16k",
        "paged_attention",
        "serving",
        "Serving extend: 8 sequences x 2048 new tokens over 16k cached prefixes (L=18432), page 128, "
        "Hq=32, Hkv=8, D=128",
        _SERVE_EXTEND,
        serving_extend,
        target=_SERVE_TARGET,
        quick_params={**_QUICK_SERVE, "batch": 2, "prefix": 16, "new": 8},
    ),
    Case(
        "paged_attention/mla-extend-b4-2048-over-16k",
        "paged_attention",
        "serving",
        "Serving extend, MLA-like head dims Dqk=192, Dv=128: 4 sequences x 2048 over 16k prefixes",
        {**_SERVE_EXTEND, "batch": 4, "head_dim": 192, "v_head_dim": 128},
        serving_extend,
        target=_SERVE_TARGET,
        quick_params={**_QUICK_SERVE, "batch": 2, "prefix": 16, "new": 8, "head_dim": 24, "v_head_dim": 16},
    ),
)
