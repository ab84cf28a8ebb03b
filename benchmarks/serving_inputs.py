"""Inputs of the serving bench cases (spec/serving.md, SERVE): paged caches, block tables, packed queries.

Shapes and their interpretation are in ``benchmarks/cases.py``'s docstring. Everything is seeded,
so every implementation of a case gets the same call.
"""

from __future__ import annotations

import math

import torch

__all__ = ["serving_decode", "serving_extend"]


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
