"""How replay, export and judge judge each op: the one table, ``REPLAY_OPS`` (docs/capture.md).

A row names the op's oracle in ``reference/``, the clause its outputs are judged under, the
tolerance family of TOL-TABLE and its scaling rule (the same one the op's conformance property
applies), the tensor arguments in the oracle's order, the options, and the names of the outputs
(a tuple output is compared element by element, in order). ``NOT_REPLAYABLE`` lists every other
op of ``backends.OPS`` with the reason; tests/test_capture_ops.py checks that together they
cover ``OPS`` exactly, so an op family merged later shows up there until it gets its row.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from conformance.tolerances import rounded_atol_scale, up_scale, value_scale


@dataclass(frozen=True)
class ReplayOp:
    op: str
    oracle: str  # "module:function" in reference/
    clause: str
    family: str  # the TOL-TABLE family
    tensors: tuple[str, ...]  # tensor arguments, in the oracle's positional order
    options: tuple[str, ...]  # keyword options
    outputs: tuple[str, ...]  # one name per output; more than one: the op returns a tuple
    # (inputs, options) -> the atol scale (None: the table unscaled)
    atol_scale: Callable[[dict, dict], torch.Tensor | None] = lambda inputs, options: None
    # (inputs, options) -> bool [B, Sq] of the rows the clause compares (None: all)
    rows: Callable[[dict, dict], torch.Tensor | None] = lambda inputs, options: None
    # (generator, dtype) -> (inputs, options): a case for `export` without a capture (None: capture only)
    sample: Callable | None = None

    def oracle_function(self):
        module, _, name = self.oracle.partition(":")
        return getattr(importlib.import_module(module), name)

    def expected(self, inputs: dict, options: dict) -> list[torch.Tensor]:
        """The oracle's outputs (float64) on the inputs as recorded (host copies)."""
        args = [inputs[name].cpu() for name in self.tensors if name not in KEYWORD_TENSORS]
        keywords = {n: inputs[n].cpu() if n in inputs else None for n in self.tensors if n in KEYWORD_TENSORS}
        keywords = {n: t for n, t in keywords.items() if n not in options}  # a None recorded as an option
        out = self.oracle_function()(*args, **options, **keywords)
        return list(out) if isinstance(out, (tuple, list)) else [out]


# Optional tensor arguments, passed by keyword (None when the call had none).
KEYWORD_TENSORS = {"padding_mask"}


def _gated(generator, dtype, width=64):
    return {"x": torch.randn(4, 2 * width, generator=generator).to(dtype) * 3}


def _elementwise(generator, dtype, width=64):
    return {"x": torch.randn(4, width, generator=generator).to(dtype) * 3}


def _norm(generator, dtype, width=64, fused=False):
    x = torch.randn(4, width, generator=generator).to(dtype)
    inputs = {"x": x}
    if fused:
        inputs["residual"] = torch.randn(4, width, generator=generator).to(dtype)
    inputs["weight"] = (1 + 0.1 * torch.randn(width, generator=generator)).to(dtype)
    return inputs


def _act(op, clause, options=(), scale=None, sample=None, rounded=False):
    def atol(inputs, opts):
        x = inputs["x"]
        return rounded_atol_scale(op, x, **opts) if rounded else up_scale(x, **opts)

    return ReplayOp(
        op,
        f"reference.activations:{op}",
        clause,
        "activations",
        ("x",),
        options,
        ("out",),
        atol,
        sample=sample,
    )


def _norm_row(op, clause, fused=False):
    tensors = ("x", "residual", "weight") if fused else ("x", "weight")
    outputs = ("normed", "new_residual") if fused else ("out",)

    def sample(generator, dtype):
        return _norm(generator, dtype, fused=fused), {"eps": 1e-6}

    return ReplayOp(op, f"reference.norms:{op}", clause, "norms", tensors, ("eps",), outputs, sample=sample)


def _prefill_scale(inputs, options):
    return value_scale(inputs["v"], inputs["q"].shape[1], _padding(inputs))


def _padding(inputs):
    mask = inputs.get("padding_mask")
    return None if mask is None else mask.bool()


def _decode_valid(inputs):
    kv_len = inputs["k_cache"].shape[2]
    return torch.arange(kv_len)[None, :] < inputs["seq_lens"].cpu()[:, None]


REPLAY_OPS: dict[str, ReplayOp] = {
    row.op: row
    for row in (
        _act(
            "gelu_and_mul",
            "ACT-GEGLU",
            ("approximate",),
            sample=lambda g, d: (_gated(g, d), {"approximate": "tanh"}),
        ),  # fmt: skip
        _act("silu_and_mul", "ACT-SWIGLU", sample=lambda g, d: (_gated(g, d), {})),
        _act("new_gelu", "ACT-GELU-VARIANTS", rounded=True, sample=lambda g, d: (_elementwise(g, d), {})),
        _act("fast_gelu", "ACT-GELU-VARIANTS", rounded=True, sample=lambda g, d: (_elementwise(g, d), {})),
        _act("quick_gelu", "ACT-GELU-VARIANTS", rounded=True, sample=lambda g, d: (_elementwise(g, d), {})),
        _norm_row("rms_norm", "NORM-RMS"),
        _norm_row("gemma_rms_norm", "NORM-GEMMA"),
        _norm_row("fused_add_rms_norm", "NORM-FUSED-ADD", fused=True),
        _norm_row("gemma_fused_add_rms_norm", "NORM-FUSED-ADD", fused=True),
        ReplayOp(
            "prefill_attention",
            "reference.attention:prefill_attention",
            "ATTN-PREFILL",
            "attention",
            ("q", "k", "v", "padding_mask"),
            ("sliding_window", "scale"),
            ("out",),
            atol_scale=_prefill_scale,
            rows=lambda inputs, options: _padding(inputs),
        ),  # fmt: skip
        ReplayOp(
            "decode_attention",
            "reference.attention:decode_attention",
            "ATTN-DECODE",
            "attention",
            ("q", "k_cache", "v_cache", "seq_lens"),
            ("sliding_window", "scale"),
            ("out",),
            atol_scale=lambda i, o: value_scale(i["v_cache"], i["q"].shape[1], _decode_valid(i)),
        ),  # fmt: skip
    )
}

_CONFIG = "a config reader or flag mapping: nothing tensor-valued to record from a model's call"
# op -> why it is not replayable (yet); an op gets a row above once it is.
NOT_REPLAYABLE: dict[str, str] = {
    "swiglu_step_and_mul": "no row yet: its bound rule ACT-SWIGLU-STEP-BOUND is not a tolerance",
    "silu_clamped_and_mul": "no row yet: the limit's clamped scale needs a test of its own",
    "swiglu_oai_and_mul": "no row yet: its rounded-steps rule takes alpha/limit/interleaved; add with a test",
    "situ_and_mul": "no row yet: its bound clause ACT-SITU-BOUND is not a per-element tolerance",
    "npu_geglu_args": _CONFIG,
    "npu_gelu_variant_args": _CONFIG,
    "swiglu_limit": _CONFIG,
    "encoder_attention_mask": "mask builder from integer arguments: exact, judged by its properties",
    "swa_decode_mask": "mask builder from integer arguments: exact, judged by its properties",
    "flash_attention_window": _CONFIG,
    "cann_prefill_tokens": _CONFIG,
    "decode_mask_window": _CONFIG,
    "attention": "no row yet: the allowed mask of a live call is usually built inside the kernel",
    "dpm_scheduler": "returns a stateful scheduler object, not a tensor of one call",
    "paged_attention": "no row yet: block tables and the cache layout need a recorded-metadata mapping",
    "layer_windows": _CONFIG,
    "window_kernel_args": _CONFIG,
    "select_experts": "no row yet: routing is judged up to slot order and ties (conformance.moe_checks)",
    "append_shared_experts": "no row yet: slot ids are compared exactly, not by a tolerance",
    "fused_moe": "no row yet: its tolerance rule moe_magnitude needs the routing options recorded",
    "moe_router_config": _CONFIG,
    "rope_inv_freq": _CONFIG,
    "rope_softmax_scale": _CONFIG,
    "rope_kernel_args": _CONFIG,
    "rope_cos_sin": "no row yet: its allowance angle_scale (ROPE-TOL) needs the positions and inv_freq",
    "rotary_embedding": "no row yet: q and k each take their own pair_scale allowance (ROPE-TOL); a row "
    "needs one atol scale per output",
    "mrope": "no row yet: as rotary_embedding, with the section layout recorded as options",
    "write_kv_cache": "an in-place write returning None: a row would judge the caches after the call "
    "bit for bit (KV-WRITE), which the recorder does not capture yet",
}
