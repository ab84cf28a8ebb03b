"""The ``flex`` and ``flex-compiled`` backends: FlexAttention (``torch.nn.attention.flex_attention``).

Masks are one ``mask_mod`` (True = attend, like SDPA), turned into a ``BlockMask`` by
``create_block_mask`` on the test's device (passed explicitly: its default is "cuda") or into
a dense bool mask by ``create_mask``. ``flex`` runs ``flex_attention`` eagerly; ``flex-compiled``
runs it through ``torch.compile(dynamic=True)``. Neither implements the free-form
``attention`` op (a [B, H, Sq, Sk] lookup mask_mod is slow in eager FlexAttention and adds
nothing the window mask_mod does not test). To keep compiles per dtype, not per example:
- one ``mask_mod`` code object serves prefill and decode; every per-example value (query
  positions, key validity, the window) is a captured tensor, never a Python constant;
- no size is 1 (``_no_size_one``): a batch or a single k/v head is doubled, a query or key
  length of 1 (decode; prefill of one token) padded to 2 (a copied query row, an invalid key),
  because 1 is a separate specialization, and eager flex_attention traces through
  torch.compile too (backend "eager"): one 0.5 s trace per specialization and dtype.
torch is imported normally; flex_attention is imported lazily so a torch without it is a skip.

Serving (spec/serving.md, SERVE) is one packed call for the whole ragged batch: q is
[1, Hq, T, Dqk]; the keys each sequence may see (positions e_b .. L_b - 1, SERVE-EVICT) are gathered
from the paged cache and packed as [1, Hkv, K + 1, D*], so positions a sequence must not read are
never gathered (a masked NaN still poisons the matmul: SERVE-PAGED). ONE ``mask_mod`` compares
captured per-token tensors (sequence id and absolute position of every query and key); ONE
``score_mod`` applies softcap (a captured cap and on/off flag) and the sink logit. The sink is
the extra last key, whose value is zero and whose score is ``sinks[h]``: it adds exp(sink) to
the denominator only (SERVE-SINKS). FlexAttention's ``lse`` (natural log, measured) would give
``out * sigmoid(lse - sink)`` too, but torch 2.13's inductor rejects ``return_lse`` on CPU, and
the extra key rounds once. A packed call evaluates T x (K + 1) mask entries; the block mask
skips the blocks between sequences. Dv != Dqk is native to FlexAttention (value [.., Ev]).
No size is 1 and, compiled, the query and key lengths are padded (``_serving_shapes``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util

import torch

from backends import NotImplementedOp
from backends._toolchain import compile_unavailable
from reference.attention import require_scale, validate_decode_args, validate_prefill_args
from reference.kv_cache import dequantized_caches
from reference.masks import require_window, validate_encoder_mask_args
from reference.serving import ServingBatch, validate_paged_args


def _flex():
    from torch.nn.attention import flex_attention as module

    return module


def window_mask_mod(query_pos: torch.Tensor, key_valid: torch.Tensor, window: torch.Tensor):
    """mask_mod of MASK-ENC for queries at absolute positions query_pos[b, q] (True = attend).

    Keys j with j <= pos, pos - j < window (MASK-ENC's i - j < W), and key_valid[b, j].
    """

    def mask_mod(b, h, q_idx, kv_idx):
        position = query_pos[b, q_idx]
        return (kv_idx <= position) & (position - kv_idx < window) & key_valid[b, kv_idx]

    return mask_mod


def _window_tensor(sliding_window: int | None, kv_len: int, device) -> torch.Tensor:
    return torch.tensor(kv_len + 1 if sliding_window is None else sliding_window, device=device)


# Sequence ids of the packed layout that are not sequences: the sink key, padding keys and queries.
SINK, PAD_KEY, PAD_QUERY = -1, -2, -3


def _static_heads():
    """Compile settings of the serving call. Recompiles for new head counts or dims keep them
    static: automatic dynamic shapes would make them symbols, and torch 2.13's CPU flex kernel then
    fails to compile (CppCompileError "'cur_kvSplitSize7' was not declared", measured on a second
    head count in one process). Each dtype x head config is one graph, so the default limit of 8
    graphs per function (beyond which dynamo runs flex_attention uncompiled) is raised to 64."""
    return torch._dynamo.config.patch(automatic_dynamic_shapes=False, recompile_limit=64)


@functools.cache
def _compiled_flex_attention():
    return torch.compile(_flex().flex_attention, dynamic=True)


def serving_window(sliding_window: int | None) -> int | None:
    """SERVE-WINDOW-ARGS: the window the serving mask_mod keeps, in keys (None = unbounded); both
    prefill/extend and decode rows go through the same packed call, hence the same value."""
    return require_window(sliding_window)


def serving_mask_mod(q_seq, q_pos, k_seq, k_pos, window, sinks_on):
    """mask_mod of SERVE over the packed layout: a query sees a key of its own sequence with
    key <= position and position - key < window; with sinks_on, also the sink key (k_seq == SINK)."""

    def mask_mod(b, h, q_idx, kv_idx):
        position, key = q_pos[q_idx], k_pos[kv_idx]
        own = (q_seq[q_idx] == k_seq[kv_idx]) & (key <= position) & (position - key < window)
        return own | ((k_seq[kv_idx] == SINK) & sinks_on)

    return mask_mod


def serving_score_mod(cap, cap_on, sink, k_seq):
    """score_mod of SERVE-SOFTCAP (cap * tanh(score / cap) when cap_on) and SERVE-SINKS (the sink
    key's score is sink[h], not softcapped)."""

    def score_mod(score, b, h, q_idx, kv_idx):
        capped = torch.where(cap_on, cap * torch.tanh(score / cap), score)
        return torch.where(k_seq[kv_idx] == SINK, sink[h], capped)

    return score_mod


def _lookup(allowed: torch.Tensor):
    """A mask_mod reading a dense [Sq, Sk] bool mask."""

    def mask_mod(b, h, q_idx, kv_idx):
        return allowed[q_idx, kv_idx]

    return mask_mod


def _batched_lookup(allowed: torch.Tensor):
    """A mask_mod reading a dense [B, Sq, Sk] bool mask."""

    def mask_mod(b, h, q_idx, kv_idx):
        return allowed[b, q_idx, kv_idx]

    return mask_mod


def _packed_layout(meta: ServingBatch, device) -> dict[str, torch.Tensor]:
    """Per query token and per gathered key: sequence id and absolute position; per key, its row in
    the flattened cache (SERVE: position p in block_table[b, p // block_size], slot p % block_size).
    The sink key (sequence id SINK, no cache row) ends the keys."""
    q_seq, q_pos, k_seq, k_pos, rows = [], [], [], [], []
    for b in range(meta.batch):
        length, query_len = meta.seq_lens[b], meta.query_len(b)
        positions = torch.arange(meta.first_visible(b), length)  # SERVE-EVICT: e_b .. L_b - 1
        table = torch.tensor(meta.block_tables[b], dtype=torch.long)
        rows.append(table[positions // meta.block_size] * meta.block_size + positions % meta.block_size)
        q_seq.append(torch.full((query_len,), b))
        q_pos.append(torch.arange(length - query_len, length))
        k_seq.append(torch.full((positions.numel(),), b))
        k_pos.append(positions)
    layout = {"q_seq": q_seq, "q_pos": q_pos, "k_seq": k_seq + [torch.tensor([SINK])], "rows": rows,
              "k_pos": k_pos + [torch.tensor([0])]}  # fmt: skip
    return {name: torch.cat(parts).to(device) for name, parts in layout.items()}


def _packed_kv(cache: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The gathered rows of a paged cache and a zero sink row: [1, Hkv, K + 1, D]."""
    keys = cache.flatten(0, 1).index_select(0, rows)
    keys = torch.cat([keys, keys.new_zeros(1, *keys.shape[1:])])
    return keys.permute(1, 0, 2).unsqueeze(0).contiguous()


def _nonfinite_sequences(k: torch.Tensor, v: torch.Tensor, k_seq: torch.Tensor) -> list[int]:
    """The sequences whose gathered keys or values (packed [1, Hkv, K + 1, D]) hold NaN or inf. One
    masked call over the packed batch multiplies every masked value by its probability 0, and
    0 * NaN = NaN: such a value would reach the other sequences' rows (spec/padding.md,
    PAD-SERVE-NAN), so the caller zeroes them for the packed call and runs these sequences alone."""
    bad = ~(torch.isfinite(k[0]).all(-1).all(0) & torch.isfinite(v[0]).all(-1).all(0))  # [K + 1]
    return sorted(int(b) for b in k_seq[bad].unique().tolist() if b >= 0)


def _pad(t: torch.Tensor, dim: int, length: int, value=0) -> torch.Tensor:
    """``t`` extended along ``dim`` to ``length`` with ``value`` (``t`` itself when long enough)."""
    if t.shape[dim] >= length:
        return t
    shape = list(t.shape)
    shape[dim] = length - t.shape[dim]
    return torch.cat([t, t.new_full(shape, value)], dim=dim)


def _no_size_one(q, k, v, query_pos, key_valid):
    """Inputs of ``FlexBackend._run`` with no batch, head or length of 1; the caller slices the
    output back. flex_attention runs through torch.compile even eagerly (backend "eager"), and
    a size of 1 is a separate specialization: each one a new trace of about 0.5 s (70 traces in
    one run of the attention and serving properties, measured). A batch or a single k/v head
    is doubled (the copy of query head h reads the copy of its k/v head: the GQA mapping holds);
    a query length of 1 gets a copied query row, a key length of 1 an invalid zero key."""
    if q.shape[0] == 1:
        q, k, v, query_pos, key_valid = (torch.cat([t, t]) for t in (q, k, v, query_pos, key_valid))
    if k.shape[1] == 1:
        q, k, v = (torch.cat([t, t], dim=1) for t in (q, k, v))
    if q.shape[2] == 1:
        q, query_pos = q.expand(-1, -1, 2, -1).contiguous(), query_pos.expand(-1, 2)
    if k.shape[2] == 1:
        k, v = (torch.cat([t, torch.zeros_like(t)], dim=2) for t in (k, v))
        key_valid = torch.cat([key_valid, torch.zeros_like(key_valid)], dim=1)
    return q, k, v, query_pos, key_valid


def _unspecialized_length(length: int, static: set[int]) -> int:
    """The least length >= ``length`` of the form 128 (n - 1) + 1 (n sparse blocks) with n >= 2
    and n not in ``static``, so neither the length nor its block count meets a static size."""
    block = _flex()._DEFAULT_SPARSE_BLOCK_SIZE
    blocks = max(2, 1 + -(-(length - 1) // block))
    while blocks in static:
        blocks += 1
    return (blocks - 1) * block + 1


def _serving_shapes(q, k, v, sink, layout, *, compiled: bool):
    """The packed serving call's inputs with no size of 1 (``layout`` is padded in place with query
    rows of sequence PAD_QUERY and zero keys of PAD_KEY). A single k/v head is doubled with its
    sinks, as in ``_no_size_one`` (the batch is always 1; the keys, ending with the sink, are >= 2).
    Eager, a single query token gets a padding row. Compiled, both lengths are padded to sizes torch
    2.13's compiled FlexAttention handles without a recompile:

    dynamic=True duck-sizes every size equal to a static one (the head counts and dims, which
    flex_attention marks static) into that constant: a block mask of 1 block, or of Hkv blocks,
    recompiled ("block_mask.q_indices size mismatch at index 2. expected 2, actual 4", measured),
    hence ``_unspecialized_length``. On CPU both lengths are equal: a captured key-length tensor
    read at kv_idx fails to compile (CppCompileError "'cur_kvSplitSize7' was not declared",
    measured) when they are distinct symbols.
    """
    if k.shape[1] == 1:
        q, k, v = (torch.cat([t, t], dim=1) for t in (q, k, v))
        sink = torch.cat([sink, sink])
    q_len, kv_len = max(q.shape[2], 2), k.shape[2]
    if compiled:
        static = {q.shape[1], k.shape[1], q.shape[3], v.shape[3]}
        if q.device.type == "cpu":
            q_len = kv_len = max(q_len, kv_len)
        q_len, kv_len = _unspecialized_length(q_len, static), _unspecialized_length(kv_len, static)
    q, k, v = _pad(q, 2, q_len), _pad(k, 2, kv_len), _pad(v, 2, kv_len)
    for name, length, value in (("q_seq", q_len, PAD_QUERY), ("q_pos", q_len, 0), ("k_seq", kv_len, PAD_KEY),
                                ("k_pos", kv_len, 0)):  # fmt: skip
        layout[name] = _pad(layout[name], 0, length, value)
    return q, k, v, sink


class FlexBackend:
    def __init__(self, name: str, *, compiled: bool):
        self.name = name
        self.compiled = compiled

    def unavailable(self, device: torch.device) -> str | None:
        if importlib.util.find_spec("torch.nn.attention.flex_attention") is None:
            return "this torch has no torch.nn.attention.flex_attention"
        if not self.compiled:
            return None
        return compile_unavailable(device, what="compiled FlexAttention")

    attention = NotImplementedOp(
        "a [B, H, Sq, Sk] lookup mask_mod is slow in eager FlexAttention and adds nothing the window "
        "mask_mod of prefill and decode does not test"
    )

    # MASK-ENC through create_mask of the same mask_mod the attention uses.
    def encoder_attention_mask(self, seq_len, *, sliding_window=None, padding_mask=None, device=None):
        seq_len, sliding_window, padding_mask, device = validate_encoder_mask_args(
            seq_len, sliding_window, padding_mask, device
        )
        device = torch.device("cpu") if device is None else torch.device(device)
        key_valid = (
            torch.ones(1, seq_len, dtype=torch.bool, device=device)
            if padding_mask is None
            else padding_mask.to(device)
        )
        query_pos = torch.arange(seq_len, device=device).expand(key_valid.shape[0], seq_len)
        mask_mod = window_mask_mod(query_pos, key_valid, _window_tensor(sliding_window, seq_len, device))
        dense = _flex().create_mask(mask_mod, key_valid.shape[0], None, seq_len, seq_len, device=device)
        return dense[0, 0] if padding_mask is None else dense

    def _run(self, q, k, v, query_pos, key_valid, window, *, scale):
        """flex_attention of window_mask_mod, with no size of 1 (``_no_size_one``)."""
        flex = _flex()
        batch, q_heads, q_len = q.shape[0], q.shape[1], q.shape[2]
        q, k, v = (t.contiguous() for t in (q, k, v))  # views (spec/attention.md): new strides would retrace
        q, k, v, query_pos, key_valid = _no_size_one(q, k, v, query_pos, key_valid)
        mask_mod = window_mask_mod(query_pos.contiguous(), key_valid.contiguous(), window)
        if not self.compiled:  # the mask_mod evaluated once and looked up: see paged_attention
            positions = [torch.arange(n, device=q.device) for n in (q.shape[0], q.shape[2], k.shape[2])]
            batch_idx, rows, keys = (
                positions[0][:, None, None],
                positions[1][None, :, None],
                positions[2][None, None],
            )
            dense = mask_mod(batch_idx, None, rows, keys)
            mask_mod = _batched_lookup(dense)
        block_mask = flex.create_block_mask(
            mask_mod, q.shape[0], None, q.shape[2], k.shape[2], device=q.device
        )
        run = _compiled_flex_attention() if self.compiled else flex.flex_attention
        return run(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=True)[:batch, :q_heads, :q_len]

    def prefill_attention(self, q, k, v, *, sliding_window, padding_mask, scale):
        batch, q_len, sliding_window, padding_mask = validate_prefill_args(
            q, k, v, sliding_window=sliding_window, padding_mask=padding_mask
        )
        scale = require_scale(scale)
        if padding_mask is None:
            key_valid = torch.ones(batch, q_len, dtype=torch.bool, device=q.device)
        else:
            key_valid = padding_mask.to(q.device)
        query_pos = torch.arange(q_len, device=q.device).expand(batch, q_len)
        window = _window_tensor(sliding_window, q_len, q.device)
        return self._run(q, k, v, query_pos, key_valid, window, scale=scale)

    def decode_attention(self, q, k_cache, v_cache, seq_lens, *, sliding_window, scale):
        seq_lens, sliding_window = validate_decode_args(
            q, k_cache, v_cache, seq_lens, sliding_window=sliding_window
        )
        scale = require_scale(scale)
        kv_len, seq_lens = k_cache.shape[2], seq_lens.to(q.device)
        key_valid = torch.arange(kv_len, device=q.device)[None, :] < seq_lens[:, None]
        # Stale rows are excluded by the mask, but a masked NaN still poisons the matmul.
        k_cache = k_cache.masked_fill(~key_valid[:, None, :, None], 0.0)
        v_cache = v_cache.masked_fill(~key_valid[:, None, :, None], 0.0)
        query_pos = (seq_lens - 1)[:, None]
        window = _window_tensor(sliding_window, kv_len, q.device)
        return self._run(q, k_cache, v_cache, query_pos, key_valid, window, scale=scale)

    # --- serving attention (spec/serving.md) ------------------------------------------------------
    def paged_attention(
        self, q, k_cache, v_cache, *, block_table, cu_seqlens_q, seq_lens, sliding_window, softcap, sinks,
        scale, k_scale=None, v_scale=None,
    ):  # fmt: skip
        """SERVE: one packed flex_attention call over the gathered keys of every sequence (fp8 caches
        dequantized into q's dtype first: spec/kv_cache.md, KV-FP8-READ). vLLM's zero-length padded
        requests add no query and no key to the packed call (spec/padding.md, PAD-SERVE-EMPTY)."""
        k_cache, v_cache = dequantized_caches(k_cache, v_cache, k_scale, v_scale, getattr(q, "dtype", None))
        meta = validate_paged_args(
            q, k_cache, v_cache, block_table=block_table, cu_seqlens_q=cu_seqlens_q, seq_lens=seq_lens,
            sliding_window=sliding_window, softcap=softcap, sinks=sinks, scale=scale, empty_requests=True,
        )  # fmt: skip
        device, tokens, q_heads = q.device, q.shape[0], q.shape[1]
        layout = _packed_layout(meta, device)
        score_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        window = serving_window(meta.sliding_window)
        window = torch.tensor(torch.iinfo(torch.long).max if window is None else window, device=device)
        cap = torch.tensor(1.0 if meta.softcap is None else meta.softcap, dtype=score_dtype, device=device)
        sink = torch.zeros(q_heads, dtype=score_dtype, device=device) if sinks is None else sinks
        sink = sink.detach().to(device, score_dtype)
        given = q
        q = q.transpose(0, 1).unsqueeze(0).contiguous()  # [1, Hq, T, Dqk]; a view's strides would retrace
        k, v = _packed_kv(k_cache, layout["rows"]), _packed_kv(v_cache, layout["rows"])
        isolated = _nonfinite_sequences(k, v, layout["k_seq"]) if meta.batch > 1 else []
        if isolated:  # the packed call multiplies another sequence's masked NaN by 0: keep it out
            k, v = (t.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0) for t in (k, v))
        q, k, v, sink = _serving_shapes(q, k, v, sink, layout, compiled=self.compiled)
        flags = (sinks is not None, meta.softcap is not None)
        sinks_on, cap_on = (torch.tensor(flag, device=device) for flag in flags)
        mask_mod = serving_mask_mod(
            layout["q_seq"], layout["q_pos"], layout["k_seq"], layout["k_pos"], window, sinks_on
        )
        score_mod = serving_score_mod(cap, cap_on, sink, layout["k_seq"])
        if not self.compiled:
            # Eager flex vmaps mask_mod and score_mod op by op (about 1 ms of Python per op per call):
            # the same mask_mod evaluated once on broadcast indices, then looked up, is 6x cheaper.
            mask_mod = _lookup(mask_mod(None, None, torch.arange(q.shape[2], device=device)[:, None],
                                        torch.arange(k.shape[2], device=device)[None, :]))  # fmt: skip
            score_mod = None if flags == (False, False) else score_mod
        flex = _flex()
        block_mask = flex.create_block_mask(mask_mod, 1, None, q.shape[2], k.shape[2], device=device)
        run = _compiled_flex_attention() if self.compiled else flex.flex_attention
        with _static_heads() if self.compiled else contextlib.nullcontext():
            out = run(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=meta.scale, enable_gqa=True)
        out = out[0, :q_heads, :tokens].transpose(0, 1)
        if isolated:
            out = out.clone()
        for b in isolated:  # PAD-SERVE-NAN: a sequence whose keys or values hold NaN or inf, alone
            rows = slice(int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]))
            alone = torch.tensor([0, rows.stop - rows.start], dtype=cu_seqlens_q.dtype, device=device)
            out[rows] = self.paged_attention(
                given[rows], k_cache, v_cache, block_table=block_table[b : b + 1], cu_seqlens_q=alone,
                seq_lens=seq_lens[b : b + 1], sliding_window=sliding_window, softcap=softcap, sinks=sinks,
                scale=scale,
            )  # fmt: skip
        return out

    layer_windows = NotImplementedOp("config parsing is the serving framework's, not the kernel's")

    def window_kernel_args(self, sliding_window) -> dict:
        """SERVE-WINDOW-ARGS: the window tensor of serving_mask_mod, for extend and decode rows alike."""
        window = serving_window(sliding_window)
        return {"prefill": {"sliding_window": window}, "decode": {"sliding_window": window}}


class FlexCompiledBackend(FlexBackend):
    """Compiled prefill, decode and paged attention only: its masks would be the eager backend's
    (create_mask is not compiled). On CPU, torch 2.13's inductor takes float32, float16 and
    bfloat16 only (float64 raises its NotImplementedError, measured)."""

    encoder_attention_mask = NotImplementedOp(
        "flex-compiled compiles prefill and decode only; its mask would be flex's "
        "(create_mask is not compiled)"
    )


BACKEND = FlexBackend("flex", compiled=False)
# vLLM's FlexAttention backend runs its graph-padded steps (PAD-SERVE-EMPTY); a subclass does not inherit it
BACKEND.empty_requests = ("paged_attention",)
COMPILED = FlexCompiledBackend("flex-compiled", compiled=True)
