"""Oracle for serving attention (SERVE and its clauses, SERVE-*).

Float64 per sequence: a sequence reads only the blocks that hold the keys some of its queries
may see (positions ``e_b .. L_b - 1``, SERVE-EVICT), upcasts just those (fp8 caches: dequantizes
just those, KV-FP8-READ), so a call costs the keys it reads, never the pool. It works in blocks of
query rows, each reading only the key span its rows can see: one matmul per kv head with its GQA
group's rows batched, the mask applied only where it can bite (the causal diagonal, the window's
left edge), the softmax's exp in place and its division applied to P @ V. Peak extra memory: the
output, one sequence's float64 keys and values, and one block's scores (SCORE_BUDGET), each in a
buffer allocated once per call.
tests/test_reference_serving.py proves it equal to a per-element brute force written from the
spec text, to the dense oracles on their special cases, and (with transformers installed) to
Gemma2's and gpt-oss's eager attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference.attention import masked_values_product, require_scale
from reference.kv_cache import is_fp8, read_scales
from reference.masks import require_window
from reference.serving_windows import (
    accepted_layer_windows,
    known_window_api,
    layer_windows,
    window_kernel_args,
    window_keys,
)
from reference.validation import (
    require_float_tensor,
    require_positive_finite_or_none,
    require_same_dtype,
    require_with_data,
)

__all__ = [
    "ServingBatch",
    "accepted_layer_windows",
    "contiguous_to_paged",
    "layer_windows",
    "paged_attention",
    "sink_softmax",
    "validate_paged_args",
    "window_kernel_args",
    "window_keys",
    "known_window_api",
]

# Scores of one query block are at most this many float64 elements (256 MiB).
SCORE_BUDGET = 1 << 25


def _require_int_tensor(value, name: str, rank: int) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ValueError(
            f"{name} must be a {rank}-D integer tensor, got a {type(value).__name__}: {value!r:.60}"
        )
    if value.dtype == torch.bool or value.is_floating_point() or value.is_complex() or value.dim() != rank:
        shape = tuple(getattr(value, "shape", ()))
        raise ValueError(
            f"{name} must be a {rank}-D integer tensor, got {getattr(value, 'dtype', value)!r} {shape}"
        )
    return require_with_data(value, name)


@dataclass(frozen=True)
class ServingBatch:
    """The validated metadata of one paged_attention call, as Python ints (SERVE)."""

    query_starts: tuple[int, ...]  # cu_seqlens_q, B + 1 entries
    seq_lens: tuple[int, ...]
    block_tables: tuple[tuple[int, ...], ...]  # per sequence, only the ceil(L / block_size) read entries
    block_size: int
    q_heads: int
    kv_heads: int
    sliding_window: int | None
    softcap: float | None
    scale: float

    @property
    def batch(self) -> int:
        return len(self.seq_lens)

    def query_len(self, b: int) -> int:
        return self.query_starts[b + 1] - self.query_starts[b]

    def first_visible(self, b: int) -> int:
        """SERVE-EVICT: e_b, the first position any query of sequence b may see."""
        first_query = self.seq_lens[b] - self.query_len(b)
        return 0 if self.sliding_window is None else max(0, first_query - self.sliding_window + 1)


def _sequence_count(block_table, cu_seqlens_q, seq_lens) -> int:
    """SERVE-ERRORS: B, on which block_table's rows, cu_seqlens_q's entries - 1 and seq_lens' entries
    agree; the one that disagrees with the other two is named (all three when they all differ)."""
    counts = {"block_table": block_table.shape[0], "cu_seqlens_q": cu_seqlens_q.shape[0] - 1,
              "seq_lens": seq_lens.shape[0]}  # fmt: skip
    if len(set(counts.values())) == 1:
        return counts["block_table"]
    wanted = {"block_table": "rows (one per sequence)", "cu_seqlens_q": "entries (B + 1)",
              "seq_lens": "entries (one per sequence)"}  # fmt: skip
    for name, n in counts.items():
        agreed = {m for other, m in counts.items() if other != name}
        if len(agreed) == 1 and n not in agreed:
            b = agreed.pop()
            want = b + 1 if name == "cu_seqlens_q" else b
            got = n + 1 if name == "cu_seqlens_q" else n
            raise ValueError(
                f"{name} must have {want} {wanted[name]}: the other metadata hold B = {b} sequences; "
                f"got {got}"
            )
    raise ValueError(
        "block_table, cu_seqlens_q and seq_lens disagree on the number of sequences B: "
        f"{block_table.shape[0]} rows, {cu_seqlens_q.shape[0]} and {seq_lens.shape[0]} entries"
    )


def validate_paged_args(
    q, k_cache, v_cache, *, block_table, cu_seqlens_q, seq_lens, sliding_window, softcap, sinks, scale,
    empty_requests: bool = False,
) -> ServingBatch:  # fmt: skip
    """SERVE-ERRORS: every argument of paged_attention; returns the metadata as a ServingBatch.

    Shared by the oracle and the backends, so all raise the same errors. ``empty_requests``: a
    backend that promises vLLM's zero-length padded requests (PAD-SERVE-EMPTY)
    accepts a request of zero queries whose ``seq_lens`` entry is 0; the oracle never does."""
    require_float_tensor(q, "q", 3)
    require_float_tensor(k_cache, "k_cache", 4)
    require_float_tensor(v_cache, "v_cache", 4)
    if is_fp8(k_cache.dtype):  # KV-FP8-READ: fp8 caches of one dtype, read with their scales
        require_same_dtype("k_cache", k_cache.dtype, v_cache=v_cache)
    else:
        require_same_dtype("q", q.dtype, k_cache=k_cache, v_cache=v_cache)
    tokens, q_heads, head_dim = q.shape
    num_blocks, block_size, kv_heads, _ = k_cache.shape
    if tuple(v_cache.shape[:3]) != tuple(k_cache.shape[:3]):
        raise ValueError(
            f"v_cache must be [num_blocks, block_size, Hkv, Dv] = {list(k_cache.shape[:3])} + [Dv], "
            f"got {tuple(v_cache.shape)}"
        )
    if k_cache.shape[3] != head_dim:
        raise ValueError(f"k_cache's last dim must be q's head dim {head_dim}, got {k_cache.shape[3]}")
    if q_heads % kv_heads:
        raise ValueError(
            f"q heads (Hq={q_heads}) must be a multiple of the cache's kv heads (Hkv={kv_heads})"
        )
    _require_int_tensor(block_table, "block_table", 2)
    _require_int_tensor(cu_seqlens_q, "cu_seqlens_q", 1)
    _require_int_tensor(seq_lens, "seq_lens", 1)
    _sequence_count(block_table, cu_seqlens_q, seq_lens)
    starts = [int(s) for s in cu_seqlens_q.tolist()]
    if starts[0] != 0 or starts[-1] != tokens:
        raise ValueError(f"cu_seqlens_q must run from 0 to T = {tokens}, got {starts}")
    lengths = [int(s) for s in seq_lens.tolist()]
    steps = list(zip(starts[:-1], starts[1:], lengths, strict=True))  # B entries each (_sequence_count)
    if any(b <= a and not (empty_requests and b == a and length == 0) for a, b, length in steps):
        raise ValueError(f"cu_seqlens_q must be strictly increasing (every query length >= 1), got {starts}")
    tables = []
    for b, length in enumerate(lengths):
        query_len = starts[b + 1] - starts[b]
        if length < query_len:
            raise ValueError(
                f"seq_lens[{b}] = {length} is less than the query length {query_len} of sequence {b}"
            )
        needed = -(-length // block_size)
        if needed > block_table.shape[1]:
            raise ValueError(
                f"block_table has {block_table.shape[1]} columns, but seq_lens[{b}] = {length} needs "
                f"{needed} blocks of block_size {block_size}"
            )
        row = tuple(int(i) for i in block_table[b, :needed].tolist())
        bad = [i for i in row if not 0 <= i < num_blocks]
        if bad:
            raise ValueError(f"block_table[{b}] reads block ids {bad} outside 0..{num_blocks - 1}")
        tables.append(row)
    if sinks is not None:
        require_float_tensor(sinks, "sinks", 1)
        if sinks.shape[0] != q_heads:
            raise ValueError(f"sinks must be a [Hq] = [{q_heads}] tensor, got shape {tuple(sinks.shape)}")
    return ServingBatch(
        query_starts=tuple(starts),
        seq_lens=tuple(lengths),
        block_tables=tuple(tables),
        block_size=block_size,
        q_heads=q_heads,
        kv_heads=kv_heads,
        sliding_window=require_window(sliding_window),
        softcap=require_positive_finite_or_none(softcap, "softcap"),
        scale=require_scale(scale),
    )


def sink_softmax(scores: torch.Tensor, allowed: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """SERVE-SINKS / ATTN: probabilities over the last dim of ``scores`` restricted to ``allowed``.

    ``sinks`` (broadcast against scores' shape without its last dim) adds exp(sink) to the
    denominator only. A row with no allowed key gets zeros; a NaN
    score it allows, or a NaN sink, makes its row NaN (SERVE-NAN). Float64 in, float64 out.
    """
    scores = scores.masked_fill(~allowed, float("-inf"))
    row_max = scores.amax(-1, keepdim=True)
    if sinks is not None:
        row_max = torch.maximum(row_max, sinks[..., None])
    row_max = row_max.clamp_min(torch.finfo(torch.float64).min)  # an empty row without a sink: -inf
    weights = torch.exp(scores - row_max)  # exactly 0 for every key not allowed
    total = weights.sum(-1, keepdim=True)
    if sinks is not None:
        total = total + torch.exp(sinks[..., None] - row_max)
    # SERVE-NAN: a visible NaN score (or a NaN sink) makes the row's total NaN and so every probability
    # NaN; only a row with no allowed key is zeros by definition (its 0 / 0 is replaced, nothing else).
    return (weights / total).masked_fill(~allowed.any(-1, keepdim=True), 0.0)


def _gather(
    cache: torch.Tensor,
    scale: torch.Tensor | None,
    table: tuple[int, ...],
    block_size: int,
    start: int,
    stop: int,
    buffer: torch.Tensor,
) -> torch.Tensor:
    """Positions start..stop-1 of one sequence as float64 [Hkv, stop - start, D] in ``buffer``'s
    memory: only the blocks holding them are read, and upcast straight into that one copy; an fp8
    cache's values are then multiplied by their float32 ``scale`` [Hkv] (KV-FP8-READ: exact)."""
    first, last = start // block_size, (stop - 1) // block_size
    ids = torch.tensor(table[first : last + 1], dtype=torch.long, device=cache.device)
    offset = start - first * block_size
    rows = cache.detach()[ids].flatten(0, 1)[offset : offset + stop - start]
    out = buffer[: rows.numel()].view(rows.shape[1], rows.shape[0], rows.shape[2])
    out.copy_(rows.transpose(0, 1))
    return out if scale is None else out.mul_(scale.to(out.device, torch.float64)[:, None, None])


def _mask_bands(scores: torch.Tensor, first_row: int, lo: int, window: int | None) -> None:
    """SERVE's mask on one block's scores [Hkv, G, R, K] (rows at positions first_row.., keys at lo..),
    in place: only the causal diagonal and the window's left edge can hold masked keys."""
    rows, keys = scores.shape[2], scores.shape[3]
    device = scores.device
    positions = torch.arange(first_row, first_row + rows, device=device)[:, None]
    diagonal = first_row + 1 - lo  # keys from here on may lie after a row's own position
    if diagonal < keys:
        key_pos = torch.arange(first_row + 1, lo + keys, device=device)[None, :]
        scores[..., diagonal:].masked_fill_(key_pos > positions, float("-inf"))
    if window is not None:
        edge = min(keys, first_row + rows - window - lo + 1)  # keys before here may be out of the window
        if edge > 0:
            key_pos = torch.arange(lo, lo + edge, device=device)[None, :]
            scores[..., :edge].masked_fill_(positions - key_pos >= window, float("-inf"))


def _exp_rows(scores: torch.Tensor, sink: torch.Tensor | None) -> torch.Tensor:
    """sink_softmax's arithmetic without its division, in place: scores become exp(s - m) and the
    returned [..., 1] denominators include the sink (SERVE-SINKS); the caller divides P @ V by them."""
    row_max = scores.amax(-1, keepdim=True)
    if sink is not None:
        row_max = torch.maximum(row_max, sink)
    row_max = row_max.clamp_min(torch.finfo(torch.float64).min)
    scores.sub_(row_max).exp_()
    total = scores.sum(-1, keepdim=True)
    if sink is not None:
        total = total + torch.exp(sink - row_max)
    return total


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    block_table: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    sliding_window: int | None,
    softcap: float | None,
    sinks: torch.Tensor | None,
    scale: float,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """SERVE: out [T, Hq, Dv] in float64 on q's device (and SERVE-PAGED ... SERVE-ERRORS).

    q [T, Hq, Dqk] (packed THD), k_cache [num_blocks, block_size, Hkv, Dqk], v_cache [..., Dv]
    (one dtype with q); block_table [B, max_blocks], cu_seqlens_q [B + 1], seq_lens [B] integer
    tensors (the queries are each sequence's LAST positions); sinks None or [Hq]; ``scale`` explicit.
    fp8 caches (KV-FP8-READ) are read as value * k_scale / v_scale, exactly: only the blocks each
    sequence reads are dequantized, as they are gathered.
    """
    k_scale, v_scale = read_scales(k_cache, v_cache, k_scale, v_scale) or (None, None)  # None: not fp8
    if k_scale is not None and isinstance(q, torch.Tensor) and q.is_floating_point():
        q = q.double()  # KV-FP8-READ: the oracle computes in float64 from q's exact values anyway
    meta = validate_paged_args(
        q, k_cache, v_cache, block_table=block_table, cu_seqlens_q=cu_seqlens_q, seq_lens=seq_lens,
        sliding_window=sliding_window, softcap=softcap, sinks=sinks, scale=scale,
    )  # fmt: skip
    tokens, q_heads, head_dim = q.shape
    kv_heads, group = meta.kv_heads, q_heads // meta.kv_heads
    sink = None if sinks is None else sinks.detach().to(torch.float64).reshape(kv_heads, group, 1, 1)
    out = torch.zeros(tokens, q_heads, v_cache.shape[3], dtype=torch.float64, device=q.device)
    spans = [meta.seq_lens[b] - meta.first_visible(b) for b in range(meta.batch)]
    blocks = [min(meta.query_len(b), max(1, SCORE_BUDGET // (q_heads * spans[b]))) for b in range(meta.batch)]
    # Buffers for the whole call, reused by every sequence and block (fresh large tensors cost page
    # faults): the scores of one query block, one sequence's float64 keys and values.
    buffer = q.new_empty(max(q_heads * n * k for n, k in zip(blocks, spans, strict=True)), dtype=torch.double)
    key_buffer = q.new_empty(max(spans) * kv_heads * head_dim, dtype=torch.float64)
    value_buffer = q.new_empty(max(spans) * kv_heads * v_cache.shape[3], dtype=torch.float64)
    for b, rows_per_block in enumerate(blocks):
        first_key, table, length = meta.first_visible(b), meta.block_tables[b], meta.seq_lens[b]
        keys = _gather(k_cache, k_scale, table, meta.block_size, first_key, length, key_buffer)
        values = _gather(v_cache, v_scale, table, meta.block_size, first_key, length, value_buffer)
        for r0 in range(0, meta.query_len(b), rows_per_block):
            r1 = min(meta.query_len(b), r0 + rows_per_block)
            start = meta.query_starts[b]
            _attend_block(out[start + r0 : start + r1], q[start + r0 : start + r1], keys, values, meta, b,
                          r0, sink, buffer)  # fmt: skip
    return out


def _attend_block(out, q_rows, keys, values, meta: ServingBatch, b: int, r0: int, sink, buffer) -> None:
    """Rows r0.. of sequence b into out [R, Hq, Dv]: one matmul per kv head over the key span the
    rows can see (GQA groups batched), masked only where SERVE's mask can bite."""
    rows, q_heads, head_dim = q_rows.shape
    kv_heads, group, window = meta.kv_heads, q_heads // meta.kv_heads, meta.sliding_window
    first_key = meta.first_visible(b)
    first_row = meta.seq_lens[b] - meta.query_len(b) + r0  # the block's first query position
    # Key span: from the first row's first key to the last row's own position (exclusive hi).
    lo = first_key if window is None else max(first_key, first_row - window + 1)
    hi = first_row + rows
    span = slice(lo - first_key, hi - first_key)
    grouped = q_rows.detach().to(torch.float64).reshape(rows, kv_heads, group, head_dim)
    grouped = grouped.permute(1, 2, 0, 3).reshape(kv_heads, group * rows, head_dim) * meta.scale
    scores = buffer[: kv_heads * group * rows * (hi - lo)].view(kv_heads, group * rows, hi - lo)
    torch.matmul(grouped, keys[:, span].transpose(-1, -2), out=scores)  # [Hkv, G * R, K]
    if meta.softcap is not None:
        scores.div_(meta.softcap).tanh_().mul_(meta.softcap)
    _mask_bands(scores.view(kv_heads, group, rows, hi - lo), first_row, lo, window)
    total = _exp_rows(scores.view(kv_heads, group, rows, hi - lo), sink)
    visible = values[:, span]
    if bool(torch.isnan(visible).any()):  # SERVE-NAN: only the rows that see a NaN value get it
        mask = torch.zeros(rows, hi - lo, dtype=torch.float64, device=scores.device)
        _mask_bands(mask.view(1, 1, rows, hi - lo), first_row, lo, window)  # -inf where masked
        visible = masked_values_product(scores, visible, (mask == 0).repeat(group, 1))
    else:
        visible = scores @ visible
    block = visible.view(kv_heads, group, rows, -1).div_(total)  # [Hkv, G, R, Dv]
    out.copy_(block.permute(2, 0, 1, 3).reshape(rows, q_heads, -1))


def contiguous_to_paged(
    k: torch.Tensor, v: torch.Tensor, *, block_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Dense BNSD k [B, Hkv, S, Dqk], v [B, Hkv, S, Dv] -> (k_cache, v_cache, block_table) of SERVE.

    Sequence b's blocks are b * n .. b * n + n - 1 (n = ceil(S / block_size)); the tail of the
    last block is zero. With a query packing of ``q.permute(0, 2, 1, 3).flatten(0, 1)``, ATTN-PREFILL
    (no padding) and ATTN-DECODE are paged_attention on these arguments (SERVE, special cases).
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
    require_float_tensor(k, "k", 4)
    require_float_tensor(v, "v", 4)
    if tuple(v.shape[:3]) != tuple(k.shape[:3]):
        raise ValueError(f"v must be [B, Hkv, S, Dv] = {list(k.shape[:3])} + [Dv], got {tuple(v.shape)}")
    batch, kv_heads, length, _ = k.shape
    blocks = -(-length // block_size)
    pad = blocks * block_size - length

    def paged(t: torch.Tensor) -> torch.Tensor:
        t = torch.nn.functional.pad(t.permute(0, 2, 1, 3), (0, 0, 0, 0, 0, pad))  # [B, S', Hkv, D]
        return t.reshape(batch * blocks, block_size, kv_heads, t.shape[-1]).contiguous()

    table = torch.arange(batch * blocks, device=k.device).reshape(batch, blocks)
    return paged(k), paged(v), table
