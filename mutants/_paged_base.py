"""The base of the serving-attention mutants: native's paged_attention split into overridable steps
(correct as it stands); ``mutants/serving.py`` and ``mutants/_serving_inputs.py`` override one step
each."""

from __future__ import annotations

import torch

from backends import paged
from backends.native import NativeBackend
from reference.kv_cache import dequantized_caches
from reference.serving import ServingBatch, validate_paged_args


class PagedNative(NativeBackend):
    """native's paged_attention in overridable steps (correct as it stands)."""

    def paged_attention(
        self,
        q,
        k_cache,
        v_cache,
        *,
        block_table,
        cu_seqlens_q,
        seq_lens,
        sliding_window,
        softcap,
        sinks,
        scale,
        k_scale=None,
        v_scale=None,
    ):
        k_cache, v_cache = dequantized_caches(k_cache, v_cache, k_scale, v_scale, getattr(q, "dtype", None))
        meta = validate_paged_args(
            q, k_cache, v_cache, block_table=block_table, cu_seqlens_q=cu_seqlens_q, seq_lens=seq_lens,
            sliding_window=sliding_window, softcap=softcap, sinks=sinks, scale=scale,
        )  # fmt: skip
        out = q.new_zeros(q.shape[0], q.shape[1], v_cache.shape[3])
        for b in range(meta.batch):
            rows = self.query_rows(meta, b)
            first_key, length = self.key_range(meta, b)
            keys = torch.arange(first_key, length, device=q.device)[None, :]
            allowed = paged.band(self.query_positions(meta, b, q.device)[:, None], keys, meta.sliding_window)
            k = self.read(k_cache, meta, b, first_key, length).transpose(0, 1)
            v = self.read_values(v_cache, meta, b, first_key, length, q.shape[-1]).transpose(0, 1)
            result = self.attend(q[rows].transpose(0, 1), k, v, allowed, meta=meta, sinks=sinks)
            out[rows] = result.transpose(0, 1)
        return out

    # --- the steps ---------------------------------------------------------------------------

    def query_rows(self, meta: ServingBatch, b: int):
        """Sequence b's rows of q and of the output (a slice or an index tensor)."""
        return slice(meta.query_starts[b], meta.query_starts[b + 1])

    def key_range(self, meta: ServingBatch, b: int) -> tuple[int, int]:
        """Positions e_b .. L_b - 1 (SERVE-EVICT: nothing before e_b is read)."""
        return meta.first_visible(b), meta.seq_lens[b]

    def query_positions(self, meta: ServingBatch, b: int, device) -> torch.Tensor:
        """The last n_b positions (SERVE: bottom-right)."""
        length = meta.seq_lens[b]
        return torch.arange(length - meta.query_len(b), length, device=device)

    def read(self, cache, meta: ServingBatch, b: int, start: int, stop: int) -> torch.Tensor:
        return paged.gather_positions(cache, meta.block_tables[b], meta.block_size, start, stop)

    def read_values(self, cache, meta: ServingBatch, b: int, start: int, stop: int, qk_dim: int):
        return self.read(cache, meta, b, start, stop)

    def attend(self, q, k, v, allowed, *, meta: ServingBatch, sinks):
        """q [Hq, n, D], k/v [Hkv, K, D*]: float32 scores, softcap, mask, (sink) softmax, @ v."""
        scores = self.scores(q, k, meta)
        if meta.softcap is not None:
            scores = meta.softcap * torch.tanh(scores / meta.softcap)
        scores = scores.masked_fill(~allowed, float("-inf"))
        return self.combine(scores, self.expand(v, q), sinks).to(q.dtype)

    def scores(self, q, k, meta: ServingBatch) -> torch.Tensor:
        return q.float() @ self.expand(k, q).transpose(-1, -2) * meta.scale

    @staticmethod
    def expand(t, q):
        """GQA: kv head h // group serves query head h."""
        return t.float().repeat_interleave(q.shape[0] // t.shape[0], dim=0)

    def combine(self, scores, v, sinks):
        if sinks is None:
            return torch.softmax(scores, dim=-1) @ v
        sink = sinks.float()[:, None, None].expand(-1, scores.shape[1], 1)
        return torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1] @ v
