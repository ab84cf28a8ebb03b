"""Serving-attention mutants: the paged, extend, softcap, sink and window bugs of spec/serving.md.

Each class is one realistic bug in an otherwise correct paged backend: ``_PagedNative``
(``mutants/_paged_base.py``) is native's algorithm (gather the visible keys of each sequence, then
attend) split into steps, and each mutant overrides exactly one step. Its docstring says what the
bug is and where such bugs come from; ``clauses`` lists the clauses of which at least one must
fail. The mutants of the scale, long sequences and views are in ``mutants/_serving_inputs.py``.
"""

from __future__ import annotations

import torch

from backends import paged
from backends.npu import AscendBackend, emulator_unavailable, load_emulator
from mutants import _serving_inputs, _serving_npu, named
from mutants import _serving_windows as windows
from mutants._paged_base import PagedNative as _PagedNative
from reference.serving import validate_paged_args

# The conformance modules (under the ``conformance`` package) that must catch these mutants.
PROPERTIES = [
    "conformance.test_serving",
    "conformance.test_serving_inputs",
    "conformance.test_serving_windows",
]


class PageSizeAssumed128(_PagedNative):
    """The block size hard-coded to 128 instead of the cache's page size (k_cache.shape[1]).

    Origin: the Step-3.5 Ascend port's review (spec/serving.md, Sources): fine while every test
    cache uses pages of 128. Out-of-buffer reads are clamped to the last row, as a kernel reading
    past its buffer returns garbage rather than raising.
    Caught by: SERVE, SERVE-PAGED.
    """

    clauses = {"SERVE", "SERVE-PAGED"}

    def read(self, cache, meta, b, start, stop):
        flat = cache.flatten(0, 1)
        table = torch.tensor(meta.block_tables[b] + (0,) * 128, device=cache.device)
        position = torch.arange(start, stop, device=cache.device)
        index = table[torch.clamp(position // 128, max=table.numel() - 1)] * 128 + position % 128
        return flat[index.clamp(max=flat.shape[0] - 1)]


class BlockTableIgnored(_PagedNative):
    """The block table ignored: the cache read as if sequence b owned blocks b * n .. b * n + n - 1.

    Origin: a contiguous-cache kernel reused for a paged cache; right whenever the test allocates
    blocks in order.
    Caught by: SERVE, SERVE-PAGED.
    """

    clauses = {"SERVE", "SERVE-PAGED"}

    def read(self, cache, meta, b, start, stop):
        per_sequence = max(-(-length // meta.block_size) for length in meta.seq_lens)
        table = [(b * per_sequence + i) % cache.shape[0] for i in range(per_sequence)]
        return paged.gather_positions(cache, table, meta.block_size, start, stop)


class ExtendCausalTopLeft(_PagedNative):
    """Extend queries placed at positions 0 .. n_b - 1 (causality aligned top-left).

    Origin: a prefill kernel's causal mask reused for extend (FlashAttention < 2.1 aligned
    top-left; FIA's sparse_mode 2 is top-left, 3 bottom-right); right whenever n_b = L_b.
    Caught by: SERVE-EXTEND, SERVE.
    """

    clauses = {"SERVE-EXTEND", "SERVE"}

    def key_range(self, meta, b):
        return 0, meta.seq_lens[b]

    def query_positions(self, meta, b, device):
        return torch.arange(meta.query_len(b), device=device)


class ExtendDropsPrefix(_PagedNative):
    """Extend attends only the new tokens: the cached prefix is never read.

    Origin: a varlen prefill kernel fed cu_seqlens_k = cu_seqlens_q (the new tokens as the whole
    sequence); right for prefill and for a decode whose L_b = 1.
    Caught by: SERVE-EXTEND, SERVE.
    """

    clauses = {"SERVE-EXTEND", "SERVE"}

    def key_range(self, meta, b):
        first, length = super().key_range(meta, b)
        return max(first, length - meta.query_len(b)), length


class SoftcapDropped(_PagedNative):
    """softcap accepted and ignored.

    Origin: a serving framework's Gemma2 encoder path (spec/serving.md, why this family exists).
    Caught by: SERVE-SOFTCAP.
    """

    clauses = {"SERVE-SOFTCAP"}

    def attend(self, q, k, v, allowed, *, meta, sinks):
        scores = self.scores(q, k, meta).masked_fill(~allowed, float("-inf"))
        return self.combine(scores, self.expand(v, q), sinks).to(q.dtype)


class SoftcapAfterMask(_PagedNative):
    """softcap applied after the mask: tanh(-inf) = -1 turns every masked key into a score -cap.

    Origin: a score_mod / epilogue ordering mistake (the mask added first, then the cap).
    Caught by: SERVE-SOFTCAP.
    """

    clauses = {"SERVE-SOFTCAP"}

    def attend(self, q, k, v, allowed, *, meta, sinks):
        if meta.softcap is None:
            return super().attend(q, k, v, allowed, meta=meta, sinks=sinks)
        # The kernel scores every key it loaded, causal or not: the ones it reads are the span.
        scores = self.scores(q, k, meta).masked_fill(~allowed, float("-inf"))
        scores = meta.softcap * torch.tanh(scores / meta.softcap)
        return self.combine(scores, self.expand(v, q), sinks).to(q.dtype)


class SinkAttendedAsKey(_PagedNative):
    """The sink treated as one more attended key whose value is the first visible value row.

    Origin: sinks implemented as a StreamingLLM-style sink TOKEN instead of a denominator-only
    logit (gpt-oss drops the sink column before multiplying by V).
    Caught by: SERVE-SINKS.
    """

    clauses = {"SERVE-SINKS"}

    def combine(self, scores, v, sinks):
        if sinks is None:
            return super().combine(scores, v, sinks)
        sink = sinks.float()[:, None, None].expand(-1, scores.shape[1], 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)
        return probs @ torch.cat([v, v[:, :1]], dim=1)


class SinksIgnored(_PagedNative):
    """sinks accepted and ignored (a plain softmax).

    Origin: a kernel without sink support behind an adapter that forwards everything else.
    Caught by: SERVE-SINKS.
    """

    clauses = {"SERVE-SINKS"}

    def combine(self, scores, v, sinks):
        return super().combine(scores, v, None)


class ValuesReadWithQkHeadDim(_PagedNative):
    """v_cache read as rows of the qk head dim (the cache viewed with Dqk, the output sliced).

    Origin: the Step-3.5 review's qk/v head-dim mix-up; invisible while Dv = Dqk.
    Caught by: SERVE-HEAD-DIMS.
    """

    clauses = {"SERVE-HEAD-DIMS"}

    def read_values(self, cache, meta, b, start, stop, qk_dim):
        values = super().read_values(cache, meta, b, start, stop, qk_dim)  # [K, Hkv, Dv]
        keys, heads, width = values.shape
        if width == qk_dim:
            return values
        # Row and head strides computed from Dqk: value (p, h, c) read at (p * Hkv + h) * Dqk + c.
        flat = values.reshape(-1)
        p = torch.arange(keys, device=values.device)[:, None, None]
        h = torch.arange(heads, device=values.device)[None, :, None]
        c = torch.arange(width, device=values.device)[None, None, :]
        index = ((p * heads + h) * qk_dim + c).clamp(max=flat.numel() - 1)
        return flat[index]


class ReadsEvictedPositions(_PagedNative):
    """A sliding layer reads from position 0 and masks afterwards: evicted (NaN) keys poison the
    matmul (NaN * 0 is NaN).

    Origin: a sliding-window kernel that masks instead of starting its reads at L - n - W + 1,
    correct until the framework frees the window's tail.
    Caught by: SERVE-EVICT.
    """

    clauses = {"SERVE-EVICT"}

    def key_range(self, meta, b):
        return 0, meta.seq_lens[b]


class CuSeqlensOffByOne(_PagedNative):
    """Sequence b's queries taken from cu_seqlens_q[b + 1] on (the first sequence's rows lost,
    every later sequence shifted by one).

    Origin: cu_seqlens_q read as ends without the leading 0 (FIA's TND `actual_seq_lengths` are
    cumulative ENDS); right for a batch of one sequence.
    Caught by: SERVE-RAGGED, SERVE.
    """

    clauses = {"SERVE-RAGGED", "SERVE"}

    def query_rows(self, meta, b):
        if meta.batch == 1:
            return super().query_rows(meta, b)
        tokens = meta.query_starts[-1]
        return (torch.arange(meta.query_len(b)) + meta.query_starts[b + 1]) % tokens


class OddLayersSlide(_PagedNative):
    """Gemma-style hybrid models slide the ODD layers (layer_idx % 2 == 1), whatever the config says.

    Origin: the SANA Gemma2 text encoder (spec/masks.md, Sources): transformers slides the even
    layers, counting from 0.
    Caught by: SERVE-LAYER-WINDOWS.
    """

    clauses = {"SERVE-LAYER-WINDOWS"}

    def layer_windows(self, config):
        windows = paged.layer_windows(config)
        if not any(w is not None for w in windows) or all(w is not None for w in windows):
            return windows
        window = config.sliding_window
        return [window if i % 2 == 1 else None for i in range(len(windows))]


class PrefillDecodeWindowsOneApart(_PagedNative):
    """Prefill gets pre_tokens = W (W + 1 keys), decode left_context = W (W keys).

    Origin: the Step-3.5 Ascend port (spec/masks.md, WINDOW-CONV; spec/serving.md,
    SERVE-WINDOW-ARGS).
    Caught by: SERVE-WINDOW-ARGS.
    """

    clauses = {"SERVE-WINDOW-ARGS"}

    def window_kernel_args(self, sliding_window):
        if sliding_window is None:
            return {"prefill": {"pre_tokens": 2147483647, "next_tokens": 0}, "decode": {"left_context": None}}
        return {
            "prefill": {"pre_tokens": sliding_window, "next_tokens": 0},
            "decode": {"left_context": sliding_window},
        }


class FiaBandForSplitDecodes(AscendBackend):
    """A mixed batch split into a decode call and an extend call, both given the band
    (sparse_mode 4, pre_tokens = W - 1), the decode call in BSND (query [B, 1, N, D]) over the paged
    cache and without the compressed mask (which it would read as an explicit one): at query length 1
    in BSND with QK_D = V_D FIA ignores sparse_mode and the band, so the one-token sequences of a
    mixed batch lose their window. An all-decode batch goes through the adapter's TND call, whose band
    holds, so decode alone is right.

    Origin: Ascend serving backends split decode and prefill requests into separate kernel calls and
    call the decode part in BSND (sglang's ascend backend); the query-length-1 caveat (spec/ascend.md,
    CANN-FIA-DECODE) then applies to it.
    Caught by: SERVE-RAGGED, SERVE.
    """

    clauses = {"SERVE-RAGGED", "SERVE"}

    def __init__(self, name: str):
        super().__init__(name, load_emulator, emulator_unavailable)

    def paged_attention(self, q, k_cache, v_cache, **kwargs):
        meta = validate_paged_args(q, k_cache, v_cache, **kwargs)
        decodes = [b for b in range(meta.batch) if meta.query_len(b) == 1]
        if not decodes or len(decodes) == meta.batch:
            return super().paged_attention(q, k_cache, v_cache, **kwargs)
        out = q.new_zeros(q.shape[0], q.shape[1], v_cache.shape[3])
        extends = [b for b in range(meta.batch) if b not in decodes]
        for group in (decodes, extends):
            rows = torch.cat([torch.arange(meta.query_starts[b], meta.query_starts[b + 1]) for b in group])
            lengths = torch.tensor([meta.query_len(b) for b in group])
            part = dict(kwargs)
            part["block_table"] = kwargs["block_table"][group]
            part["seq_lens"] = kwargs["seq_lens"][group]
            part["cu_seqlens_q"] = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
            call = self._band_call if group is decodes else super().paged_attention
            out[rows.to(q.device)] = call(q[rows.to(q.device)], k_cache, v_cache, **part)
        return out

    def _band_call(self, q, k_cache, v_cache, **kwargs):
        meta = validate_paged_args(q, k_cache, v_cache, **kwargs)
        num_blocks, block_size, kv_heads, head_dim = k_cache.shape
        return self.ops.npu_fused_infer_attention_score(
            q.contiguous()[:, None],  # BSND, S = 1
            k_cache.reshape(num_blocks, block_size, kv_heads * head_dim),
            v_cache.reshape(num_blocks, block_size, kv_heads * head_dim),
            input_layout="BSND", num_heads=meta.q_heads, num_key_value_heads=kv_heads, scale=meta.scale,
            block_table=kwargs["block_table"].to(device=q.device, dtype=torch.int32), block_size=block_size,
            actual_seq_lengths_kv=list(meta.seq_lens), sparse_mode=4,
            **self.cann_prefill_tokens(meta.sliding_window),
        )[0][:, 0]  # fmt: skip


BACKENDS = [
    named(PageSizeAssumed128, "wrong-page-size-assumed-128"),
    named(BlockTableIgnored, "wrong-block-table-ignored"),
    named(ExtendCausalTopLeft, "wrong-extend-causal-top-left"),
    named(ExtendDropsPrefix, "wrong-extend-drops-prefix"),
    named(SoftcapDropped, "wrong-softcap-dropped"),
    named(SoftcapAfterMask, "wrong-softcap-after-mask"),
    named(SinkAttendedAsKey, "wrong-sink-attended-as-key"),
    named(SinksIgnored, "wrong-sinks-ignored"),
    named(ValuesReadWithQkHeadDim, "wrong-values-read-with-qk-head-dim"),
    named(ReadsEvictedPositions, "wrong-reads-evicted-positions"),
    named(CuSeqlensOffByOne, "wrong-cu-seqlens-off-by-one"),
    named(OddLayersSlide, "wrong-odd-layers-slide"),
    named(PrefillDecodeWindowsOneApart, "wrong-prefill-decode-windows-one-apart"),
    named(FiaBandForSplitDecodes, "wrong-fia-band-for-split-decodes"),
    *(named(cls, name) for cls, name in _serving_inputs.MUTANTS),  # ATTN-SCALE, SERVE-LONG, SERVE-LAYOUT
    *_serving_npu.BACKENDS,  # the Ascend adapter's FIA v2 and _npu_paged_attention calls
]


BACKENDS += [
    named(windows.QwenWindowSwitchDefaultsOn, "wrong-qwen-window-switch-defaults-on"),
    named(windows.Cohere2WindowPlusTwo, "wrong-cohere2-window-plus-two"),
]
