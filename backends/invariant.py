"""``invariant``: the reference that keeps every promise of spec/invariance.md (the positive control).

Batch invariance by construction, not by luck:
- every reduction is a fixed-order float32 sum (``ordered_sum``: column 0, then + column 1, ...),
  vectorized over the rows only, so a row's sum is the same chain of roundings in any batch;
- transcendental functions (exp, sigmoid, rsqrt, tanh) are evaluated in float64 and rounded to
  float32 once: torch takes a vector or a scalar path for an element by its flat position in the
  tensor (so by the batch), and the two may differ in the last float64 bit, which the rounding to
  float32 hides;
- top-k is a stable sort (ties keep the lower expert id), row by row;
- attention runs per sequence and per query row over KV splits of a fixed size ``kv_split_size``
  starting at position 0, each split's partial (max, sum, weighted values) combined in position
  order; a split a row cannot see changes no bit of it, so prefill, decode, chunked prefill and a
  cached prefix give the same chain of roundings for a row.
Its values are close to the oracles' but it is judged only on spec/invariance.md's clauses
(``clause_scope``); it runs on the CPU.
"""

from __future__ import annotations

import torch

from reference import kv_cache as kv_oracle
from reference.moe import OAI_ALPHA, validate_fused_args, validate_routing_args
from reference.norms import validate_norm_args
from reference.serving import validate_paged_args

# The clauses of spec/invariance.md: the only ones this backend is judged on.
INVARIANCE_CLAUSES = frozenset(
    {
        "DET-RUN",
        "INV-ROW",
        "INV-PERM",
        "INV-SEQ",
        "INV-SPLIT",
        "INV-PREFILL-DECODE",
        "INV-CHUNK",
        "INV-PREFIX",
        "INV-VACUITY",
    }  # fmt: skip
)


def ordered_sum(t: torch.Tensor) -> torch.Tensor:
    """The sum over the last dim, left to right, in t's dtype: the same roundings for a row in any batch."""
    acc = t[..., 0].clone()
    for j in range(1, t.shape[-1]):
        acc = acc + t[..., j]
    return acc


def exp32(t: torch.Tensor) -> torch.Tensor:
    """exp of a float32 tensor through float64 (see the module docstring)."""
    return torch.exp(t.double()).float()


class InvariantBackend:
    name = "invariant"
    deterministic = True
    batch_invariant = True
    kv_split_size = 8
    clause_scope = INVARIANCE_CLAUSES

    def unavailable(self, device: torch.device) -> str | None:
        return None if device.type == "cpu" else "the invariant reference backend runs on the cpu"

    # --- row-wise ops (INV-ROW) ---------------------------------------------------------------

    def rms_norm(self, x, weight, *, eps):
        eps = validate_norm_args(x, weight, eps)
        return (self._normalized(x.float(), eps, x.dtype) * weight).to(x.dtype)  # NORM-RMS's LLaMA order

    def fused_add_rms_norm(self, x, residual, weight, *, eps):
        eps = validate_norm_args(x, weight, eps, residual=residual)
        new_residual = (x.float() + residual.float()).to(x.dtype)
        return self.rms_norm(new_residual, weight, eps=eps), new_residual

    def _mean_square(self, h):
        return ordered_sum(h * h) / h.shape[-1]

    def _normalized(self, h, eps, dtype):
        mean_square = self._mean_square(h)
        inv = torch.rsqrt(mean_square.double() + eps).float()
        return (h * inv[..., None]).to(dtype)

    def silu_and_mul(self, x):
        gate, up = x.double().chunk(2, dim=-1)
        return (gate * torch.sigmoid(gate) * up).to(x.dtype)  # elementwise: one rounding per element

    def select_experts(self, router_logits, *, top_k, scoring, renormalize, correction_bias, num_groups,
                       topk_group, group_score, routed_scaling_factor):  # fmt: skip
        validate_routing_args(router_logits, top_k, scoring, renormalize, correction_bias, num_groups,
                              topk_group, group_score, routed_scaling_factor)  # fmt: skip
        if scoring not in ("softmax", "sigmoid") or correction_bias is not None or num_groups != 1:
            raise NotImplementedError("routing by softmax or sigmoid only, no bias or groups")
        logits = router_logits.float()
        if scoring == "softmax":
            e = exp32(logits - logits.amax(dim=-1, keepdim=True))  # a max is exact in any order
            scores = e / ordered_sum(e)[..., None]
        else:
            scores = torch.sigmoid(logits.double()).float()
        ids = self._top_ids(scores, top_k)
        picked = scores.gather(1, ids)
        if renormalize:
            picked = picked / ordered_sum(picked)[..., None]
        return picked * float(routed_scaling_factor), ids

    def _top_ids(self, scores, top_k):
        """The top_k ids by descending score, ties to the lower id (a stable sort, row by row)."""
        return torch.sort(scores, dim=-1, descending=True, stable=True).indices[:, :top_k]

    def fused_moe(self, x, w13, w2, topk_weights, topk_ids, *, activation, limit,
                  apply_router_weight_on_input, output_scale):  # fmt: skip
        limit = validate_fused_args(x, w13, w2, topk_weights, topk_ids, activation, limit,
                                    apply_router_weight_on_input, output_scale)  # fmt: skip
        ids, w = topk_ids.long(), topk_weights.float()[..., None]
        v = x.float()[:, None, :].expand(-1, ids.shape[1], -1)  # [T, k, H]
        if apply_router_weight_on_input:
            v = v * w
        h = ordered_sum(v[:, :, None, :] * w13.float()[ids])  # [T, k, 2I]
        act = self._activation(h, activation, limit)  # [T, k, I]
        y = self._down(act, w2.float()[ids], ids)  # [T, k, H]
        if not apply_router_weight_on_input:
            y = y * w
        return (self._combine(y) * float(output_scale)).to(x.dtype)

    def _combine(self, y):
        """The k slots' outputs [T, k, H] of each token summed in slot order."""
        return ordered_sum(y.transpose(1, 2))

    def _down(self, act, w2_rows, ids):
        """act [T, k, I] times each slot's expert's w2 [H, I]: an ordered sum over I per row."""
        return ordered_sum(act[:, :, None, :] * w2_rows)

    def _activation(self, h, activation, limit):
        """MOE-FUSED's activations in float64, rounded to float32 once (elementwise)."""
        h = h.double()
        inf = float("inf") if limit is None else limit
        if activation == "swiglu_oai":
            gate, up = h[..., 0::2].clamp(max=inf), h[..., 1::2].clamp(-inf, inf)
            return (gate * torch.sigmoid(OAI_ALPHA * gate) * (up + 1)).float()
        gate, up = h.chunk(2, dim=-1)
        up = up.clamp(-inf, inf)
        if activation == "silu":
            gate = gate.clamp(max=inf)
            return (gate * torch.sigmoid(gate) * up).float()
        return ((gate * torch.sigmoid(gate)).clamp(max=inf) * up).float()

    # --- attention (INV-SEQ, INV-SPLIT, INV-PREFILL-DECODE, INV-CHUNK, INV-PREFIX) ---------------

    def paged_attention(self, q, k_cache, v_cache, *, block_table, cu_seqlens_q, seq_lens, sliding_window,
                        softcap, sinks, scale, k_scale=None, v_scale=None):  # fmt: skip
        if k_scale is not None or v_scale is not None:
            raise NotImplementedError("the invariant reference reads no fp8 cache")
        meta = validate_paged_args(q, k_cache, v_cache, block_table=block_table, cu_seqlens_q=cu_seqlens_q,
                                   seq_lens=seq_lens, sliding_window=sliding_window, softcap=softcap,
                                   sinks=sinks, scale=scale)  # fmt: skip
        out = torch.empty(q.shape[0], q.shape[1], v_cache.shape[-1], dtype=q.dtype, device=q.device)
        for b in range(meta.batch):
            start, stop, length = meta.query_starts[b], meta.query_starts[b + 1], meta.seq_lens[b]
            slots = [meta.block_tables[b][p // meta.block_size] * meta.block_size + p % meta.block_size
                     for p in range(length)]  # fmt: skip
            keys = k_cache.flatten(0, 1)[slots].float()  # [L, Hkv, D]
            values = v_cache.flatten(0, 1)[slots].float()
            positions = torch.arange(length - (stop - start), length)
            splits = self.split_bounds(meta, b, length)
            rows = self._attend(q[start:stop].float(), keys, values, positions, meta, sinks, splits)
            out[start:stop] = rows.to(q.dtype)
        return out

    def split_bounds(self, meta, b: int, length: int) -> list[tuple[int, int]]:
        """The KV splits of sequence ``b`` (``length`` positions): [0, N), [N, 2N), ... (INV-SPLIT)."""
        n = self.kv_split_size
        return [(lo, min(lo + n, length)) for lo in range(0, length, n)]

    def _attend(self, q, keys, values, positions, meta, sinks, splits):
        """q [R, Hq, D] at ``positions`` over keys/values [L, Hkv, D*]: split by split, each split's
        (max, sum, weighted values) merged into the running ones in position order."""
        group = meta.q_heads // meta.kv_heads
        k = keys.repeat_interleave(group, dim=1)  # [L, Hq, D]: GQA, an exact copy
        v = values.repeat_interleave(group, dim=1)
        rows, heads = q.shape[0], q.shape[1]
        m = torch.full((rows, heads), float("-inf"))
        total = torch.zeros(rows, heads)
        acc = torch.zeros(rows, heads, v.shape[-1])
        for lo, hi in splits:
            s = ordered_sum(q[:, None] * k[None, lo:hi]) * meta.scale  # [R, n, Hq]
            if meta.softcap is not None:
                s = (meta.softcap * torch.tanh(s.double() / meta.softcap)).float()
            key_pos = torch.arange(lo, hi)
            seen = key_pos[None, :] <= positions[:, None]
            if meta.sliding_window is not None:
                seen &= positions[:, None] - key_pos[None, :] < meta.sliding_window
            s = s.masked_fill(~seen[:, :, None], float("-inf"))
            m_split = s.amax(dim=1)  # [R, Hq]; -inf where the row sees nothing of the split
            new_m = torch.maximum(m, m_split)
            safe = torch.where(torch.isinf(new_m), torch.zeros_like(new_m), new_m)
            p = exp32(s - safe[:, None])  # 0 for an unseen key: adds nothing to the sums below
            keep = exp32(m - safe)
            total = total * keep + ordered_sum(p.transpose(1, 2))
            weighted = p.permute(0, 2, 1)[..., None, :] * v[lo:hi].permute(1, 2, 0)  # [R, Hq, Dv, n]
            acc = acc * keep[..., None] + ordered_sum(weighted)
            m = new_m
        if sinks is not None:
            total = total + exp32(sinks.float()[None, :] - m)
        return acc / total[..., None]

    # --- the KV cache's write (INV-CHUNK: the cache written chunk by chunk) --------------------

    def write_kv_cache(self, key, value, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None):
        if k_scale is not None or v_scale is not None:
            raise NotImplementedError("the invariant reference writes no fp8 cache")
        kv_oracle.write_kv_cache(key, value, k_cache, v_cache, slot_mapping)  # a copy: exact, invariant


BACKEND = InvariantBackend()
