"""The Ascend adapter, as ``npu`` (real ``torch_npu`` on an NPU) and ``npu-emulated``.

Both are the same ``AscendBackend`` code; only the op module differs: ``torch_npu`` itself,
or ``backends.npu_emulator`` (pure PyTorch, runs anywhere). So the emulated backend tests
the adapter logic (argument mapping, defaults, layouts) on a CPU-only machine, and the real
one tests the kernels where an NPU is present. torch_npu is imported only inside a guard.
"""

from __future__ import annotations

import functools
import importlib
import types
from collections.abc import Callable

import torch
import torch.nn.functional as F

from backends import NotImplementedOp, native, npu_kv_cache
from reference.activations import APPROXIMATE_MODES, GELU_VARIANTS, validate_gated_input
from reference.attention import require_scale, validate_decode_args, validate_prefill_args, validate_qkv
from reference.masks import CANN_MAX_TOKENS, require_window
from reference.rope import mrope_rows, require_bool, validate_rope_args
from reference.validation import require_choice, require_floating, require_positive_finite_or_none

FIA_COMPRESSED_MASK_SIZE = 2048


def import_torch_npu() -> types.ModuleType | None:
    try:
        return importlib.import_module("torch_npu")
    except Exception:  # ImportError, or a broken CANN install raising at import
        return None


def _real_ops_unavailable(device: torch.device) -> str | None:
    if device.type != "npu":
        return f"the npu backend runs only on npu devices, not {device.type}"
    if import_torch_npu() is None:
        return "torch_npu is not installed or failed to import"
    return None


def emulator_unavailable(device: torch.device) -> str | None:
    """The emulator runs on every device."""
    return None


def load_emulator() -> types.ModuleType:
    """The op module of ``npu-emulated``: ``backends.npu_emulator``."""
    return importlib.import_module("backends.npu_emulator")


@functools.cache
def _compressed_causal_mask(device: torch.device) -> torch.Tensor:
    size = FIA_COMPRESSED_MASK_SIZE
    return torch.ones(size, size, dtype=torch.bool, device=device).triu(1)


def compressed_causal_mask(device) -> torch.Tensor:
    """The 2048x2048 mask FIA's sparse modes 2-4 require: True strictly above the diagonal. Built
    once per device (4M elements per call was most of a small emulated call); FIA only reads it."""
    return _compressed_causal_mask(torch.device(device))


def fia_heads(q, k) -> dict:
    """FIA's head-count and layout arguments for BNSD q and k."""
    return {"num_heads": q.shape[1], "num_key_value_heads": k.shape[1], "input_layout": "BNSD"}


class AscendBackend:
    """The adapter from the suite's ops to the Ascend fused ops."""

    # DET-RUN (spec/invariance.md): FIA V4, behind paged_attention's FIA v2 path, is deterministic by
    # default (documented); the ATB decode path is inferred to be (spec/ascend.md, CANN-DETERMINISM).
    deterministic = ("paged_attention",)

    def __init__(
        self,
        name: str,
        load_ops: Callable[[], types.ModuleType],
        unavailable: Callable[[torch.device], str | None],
    ):
        self.name = name
        self._load_ops = load_ops
        self._unavailable = unavailable

    def unavailable(self, device: torch.device) -> str | None:
        return self._unavailable(device)

    @property
    def ops(self) -> types.ModuleType:
        return self._load_ops()

    # ACT-GEGLU-NPU-ARGS: the whole mapping lives here, so it can be checked on its own.
    def npu_geglu_args(self, approximate: str) -> dict:
        require_choice(approximate, "approximate", APPROXIMATE_MODES)
        return {"dim": -1, "approximate": 1 if approximate == "tanh" else 0, "activate_left": True}

    def gelu_and_mul(self, x: torch.Tensor, *, approximate: str) -> torch.Tensor:
        validate_gated_input(x)
        y, _ = self.ops.npu_geglu(x, **self.npu_geglu_args(approximate))
        return y

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        validate_gated_input(x)
        return self.ops.npu_swiglu(x.contiguous(), dim=-1)

    def swiglu_step_and_mul(self, x: torch.Tensor, *, limit: float | None) -> torch.Tensor:
        d = validate_gated_input(x)
        limit = require_positive_finite_or_none(limit, "limit")
        if limit is None:
            return self.silu_and_mul(x)
        gate, up = x[..., :d], x[..., d:]
        return F.silu(gate).clamp(max=limit) * up.clamp(-limit, limit)

    # ACT-GELU-NPU-OPS: which torch_npu op gives each GELU variant; the whole mapping lives here.
    # npu_fast_gelu is CANN's sigmoid FastGelu (QuickGELU), not transformers' tanh FastGELU.
    def npu_gelu_variant_args(self, op: str) -> dict:
        require_choice(op, "op", GELU_VARIANTS)
        return {"op": "npu_fast_gelu"} if op == "quick_gelu" else {"op": "npu_gelu", "approximate": "tanh"}

    def _gelu_variant(self, op: str, x: torch.Tensor) -> torch.Tensor:
        require_floating(x, "x")
        args = dict(self.npu_gelu_variant_args(op))
        return getattr(self.ops, args.pop("op"))(x, **args)

    def new_gelu(self, x: torch.Tensor) -> torch.Tensor:
        return self._gelu_variant("new_gelu", x)

    def fast_gelu(self, x: torch.Tensor) -> torch.Tensor:
        return self._gelu_variant("fast_gelu", x)

    def quick_gelu(self, x: torch.Tensor) -> torch.Tensor:
        return self._gelu_variant("quick_gelu", x)

    # ACT-SILU-CLAMPED / ACT-SWIGLU-OAI: no CANN op is known for them (spec/activations.md, Sources).
    silu_clamped_and_mul = NotImplementedOp("no CANN op is known for the clamp-before-SiLU SwiGLU")
    swiglu_oai_and_mul = NotImplementedOp("no CANN op is known for the gpt-oss SwiGLU (alpha, +1)")
    # ACT-SITU: no CANN op is documented for the Kimi-K3 SiTU (spec/activations.md, Sources).
    situ_and_mul = NotImplementedOp("no CANN op is documented for SiTU (the tanh soft-clips)")

    # --- masks and attention on FIA (spec/masks.md, spec/attention.md) ---------------------
    # Masks are bool; FIA's polarity is True = masked.

    # MASK-ENC / MASK-SWA-DECODE: boolean ops, shared with native.
    encoder_attention_mask = staticmethod(native.encoder_attention_mask)
    swa_decode_mask = staticmethod(native.swa_decode_mask)

    # WINDOW-CONV: the whole window mapping lives in these two methods.
    def cann_prefill_tokens(self, sliding_window):
        require_window(sliding_window)
        if sliding_window is None:
            return {"pre_tokens": CANN_MAX_TOKENS, "next_tokens": 0}
        return {"pre_tokens": sliding_window - 1, "next_tokens": 0}

    def decode_mask_window(self, sliding_window):
        return require_window(sliding_window, optional=False)

    def fia(self, q, k, v, *, scale, **options):
        """npu_fused_infer_attention_score in BNSD with q's and k's head counts; its output only."""
        return self.ops.npu_fused_infer_attention_score(q, k, v, scale=scale, **fia_heads(q, k), **options)[0]

    def attention(self, q, k, v, *, allowed, scale):
        """ATTN: sparse_mode 1 (full explicit mask), polarity inverted for FIA; bool masks only."""
        batch, q_heads, _, q_len, kv_len, _ = validate_qkv(q, k, v)
        scale = require_scale(scale)
        if not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool:
            raise TypeError(
                f"allowed must be a bool tensor (True = attend), got {getattr(allowed, 'dtype', allowed)}"
            )
        masked = ~allowed.expand(batch, q_heads, q_len, kv_len)
        if bool((masked != masked[:, :1]).any()):
            raise ValueError("allowed must be the same for every head (FIA takes one mask per batch)")
        return self.fia(q, k, v, scale=scale, atten_mask=masked[:, :1].contiguous(), sparse_mode=1)

    def prefill_attention(self, q, k, v, *, sliding_window, padding_mask, scale):
        """ATTN-PREFILL: band (sparse_mode 4) or causal (3) from the compressed mask; with padding,
        an explicit full mask (sparse_mode 0), since FIA's lengths only express right padding."""
        _, q_len, _, _ = validate_prefill_args(
            q, k, v, sliding_window=sliding_window, padding_mask=padding_mask
        )
        scale = require_scale(scale)
        tokens = self.cann_prefill_tokens(sliding_window)
        # S = 1 dispatches to the incremental kernel, which would read the compressed mask as
        # an explicit [B, 1, 1, Sk] mask: take the explicit-mask path below instead.
        if padding_mask is None and q_len > 1:
            sparse_mode = 3 if sliding_window is None else 4
            return self.fia(
                q,
                k,
                v,
                scale=scale,
                atten_mask=compressed_causal_mask(q.device),
                sparse_mode=sparse_mode,
                **tokens,
            )
        allowed = self.encoder_attention_mask(
            q_len, sliding_window=sliding_window, padding_mask=padding_mask, device=q.device
        )
        masked = (~allowed).expand(q.shape[0], 1, q_len, q_len).contiguous()
        return self.fia(q, k, v, scale=scale, atten_mask=masked, sparse_mode=0, **tokens)

    def decode_attention(self, q, k_cache, v_cache, seq_lens, *, sliding_window, scale):
        """ATTN-DECODE: an explicit SWA mask (True = masked) plus actual_seq_lengths_kv; for query
        length 1 FIA ignores pre_tokens/next_tokens and sparse_mode."""
        seq_lens, _ = validate_decode_args(q, k_cache, v_cache, seq_lens, sliding_window=sliding_window)
        scale = require_scale(scale)
        kv_len = k_cache.shape[2]
        window = kv_len if sliding_window is None else self.decode_mask_window(sliding_window)
        masked = self.swa_decode_mask(seq_lens.to(q.device), kv_len, window=window)[:, :, None, :]
        return self.fia(
            q, k_cache, v_cache, scale=scale, atten_mask=masked, actual_seq_lengths_kv=seq_lens.tolist()
        )

    # --- serving attention (spec/serving.md): paged_attention in backends/npu_serving.py, over FIA v2
    # and _npu_paged_attention (spec/ascend.md, CANN-FIA-V2, CANN-PAGED-ATTENTION) ---

    layer_windows = NotImplementedOp("config parsing is the serving framework's, not the kernel's")

    def window_kernel_args(self, sliding_window):
        """SERVE-WINDOW-ARGS: the raw window arguments, from the methods the attention itself uses."""
        sliding_window = require_window(sliding_window)
        left = None if sliding_window is None else self.decode_mask_window(sliding_window)
        return {"prefill": self.cann_prefill_tokens(sliding_window), "decode": {"left_context": left}}

    # --- rotary embeddings (spec/rope.md): npu_rotary_mul and npu_mrope (spec/ascend.md,
    # CANN-ROTARY-MUL, CANN-MROPE); the config readers and cos/sin rows run on the host (native's).
    rope_inv_freq = staticmethod(native.NativeBackend.rope_inv_freq)
    rope_softmax_scale = staticmethod(native.NativeBackend.rope_softmax_scale)
    rope_cos_sin = staticmethod(native.NativeBackend.rope_cos_sin)

    # ROPE-KERNEL-ARGS: the whole mapping lives here; both ops take torch_npu's rotary_mode.
    def rope_kernel_args(self, is_neox_style: bool) -> dict:
        mode = "half" if require_bool(is_neox_style, "is_neox_style") else "interleave"
        ops = ("npu_apply_rotary_pos_emb", "npu_rotary_mul", "npu_mrope")
        return {f"torch_npu.{op}": {"rotary_mode": mode} for op in ops}

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        """npu_apply_rotary_pos_emb (in place, TND) on copies of the rotated dims of q and k, with
        full-width cos/sin per token in their dtype; the pass-through dims appended (ROPE-PURE:
        inputs untouched)."""
        validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style)
        half = cos_sin_cache.shape[-1] // 2
        rows = cos_sin_cache[positions.long()].to(query.device)
        args = self.rope_kernel_args(is_neox_style)["torch_npu.npu_apply_rotary_pos_emb"]
        r1, r2 = _full_width_rows(rows[..., :half], rows[..., half:], args["rotary_mode"])
        r = 2 * half
        # Copies, never views: .contiguous() of a fully rotated head is the input itself, which the op
        # would overwrite (ROPE-PURE caught exactly that).
        q, k = (t[..., :r].clone(memory_format=torch.contiguous_format) for t in (query, key))
        pairs = [(q, k)] if q.dtype == k.dtype else [(q, q.clone()), (k, k.clone())]
        for x, y in pairs:  # the op takes q, k, cos and sin of one dtype (CANN-APPLY-ROPE)
            c, s = r1[:, None, :].to(x.dtype), r2[:, None, :].to(x.dtype)
            self.ops.npu_apply_rotary_pos_emb(x, y, c, s, layout=4, **args)
        return torch.cat([q, query[..., r:]], dim=-1), torch.cat([k, key[..., r:]], dim=-1)

    def _rotary_mul(self, query, key, cos, sin, is_neox_style):
        args = self.rope_kernel_args(is_neox_style)["torch_npu.npu_rotary_mul"]
        r1, r2 = _full_width_rows(cos, sin, args["rotary_mode"])
        r = r1.shape[-1]
        out = []
        for x in (query, key):
            c, s = (t.to(x.dtype)[None, :, None, :] for t in (r1, r2))  # the input's dtype (CANN-ROTARY-MUL)
            rot = self.ops.npu_rotary_mul(x[None, ..., :r].contiguous(), c, s, **args)[0]
            out.append(torch.cat([rot, x[..., r:]], dim=-1))
        return out[0], out[1]

    def mrope(self, positions, query, key, cos_sin_cache, *, mrope_section, is_neox_style, mrope_interleaved):
        """npu_mrope for Qwen2-VL sections (one head size for q and k); the interleaved layout, which
        npu_mrope does not document, through npu_rotary_mul with the rows gathered here."""
        r = validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style, rows=3)
        rows = mrope_rows(mrope_section, r // 2, mrope_interleaved).to(positions.device)
        if mrope_interleaved or query.shape[-1] != key.shape[-1] or query.dtype != key.dtype:
            gathered = cos_sin_cache[positions.long()]  # [3, T, r]
            pick = rows[None, None, :].expand(1, gathered.shape[1], -1)
            cos = gathered[..., : r // 2].gather(0, pick)[0].to(query.device)
            sin = gathered[..., r // 2 :].gather(0, pick)[0].to(query.device)
            return self._rotary_mul(query, key, cos, sin, is_neox_style)
        args = self.rope_kernel_args(is_neox_style)["torch_npu.npu_mrope"]
        tokens, head_size = query.shape[0], query.shape[-1]
        q, k = self.ops.npu_mrope(
            positions,
            query.reshape(tokens, -1),
            key.reshape(tokens, -1),
            cos_sin_cache.to(query.dtype),
            head_size,
            mrope_section=list(mrope_section),
            **args,
        )
        return q.reshape(query.shape), k.reshape(key.shape)


def _full_width_rows(cos, sin, rotary_mode: str):
    """Half-width cos/sin as the full-width r1/r2 a torch_npu rope op pairs with its rotary_mode:
    cat(c, c) for "half", repeat_interleave(c, 2) for "interleave" (spec/ascend.md, CANN-ROTARY-MUL)."""
    if rotary_mode == "half":
        return torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    return cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)


# --- KV-cache write (spec/kv_cache.md; spec/ascend.md, CANN-KV-WRITE): backends/npu_kv_cache.py ---
AscendBackend.write_kv_cache = npu_kv_cache.write_kv_cache


BACKEND = AscendBackend("npu", import_torch_npu, _real_ops_unavailable)
EMULATED = AscendBackend("npu-emulated", load_emulator, emulator_unavailable)

# --- MoE routing and the expert computation (spec/moe.md), in its own module ------------------
from backends import npu_moe  # noqa: E402 - after the class it extends

npu_moe.install(AscendBackend)

# --- norms (spec/norms.md; spec/ascend.md, CANN-RMS-NORM), in its own module ------------------
from backends import npu_norms  # noqa: E402 - after the class it extends

npu_norms.install(AscendBackend)

# --- serving attention (spec/serving.md; spec/ascend.md, CANN-FIA-V2), in its own module -------
from backends import npu_serving  # noqa: E402 - after the class it extends

npu_serving.install(AscendBackend, compressed_causal_mask)

# --- W8A8 int8 quant (spec/quant.md; spec/ascend.md, CANN-QUANT-MATMUL), in its own module -------
from backends import npu_quant  # noqa: E402 - after the class it extends

npu_quant.install(AscendBackend)
