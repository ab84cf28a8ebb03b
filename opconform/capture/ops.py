"""How replay, export and judge judge each op: the one table, ``REPLAY_OPS`` (docs/capture.md).

A row names the op's oracle in ``reference/``, the clause its outputs are judged under, the
tolerance family of TOL-TABLE and its scaling rule (the same one the op's conformance property
applies), the tensor arguments in the oracle's order, the options, and the names of the outputs
(a tuple output is compared element by element, in order, each with its own atol scale when the
rule gives a tuple), the tensors passed by keyword, and for an op no per-element tolerance judges
(routing) its own ``judge``. The serving, mask, MoE and rope rows are in ``ops_more``, the quant
rows in ``ops_quant``.
``NOT_REPLAYABLE`` lists every other op of ``backends.OPS`` with the reason;
tests/test_capture_ops.py checks that together they cover ``OPS`` exactly, so an op family
merged later shows up there until it gets its row.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from conformance.tolerances import oai_up_scale, rounded_atol_scale, situ_up_scale, up_scale, value_scale
from opconform.capture import ops_more, ops_quant

# Optional tensor arguments, passed by keyword (None when the call had none): the rows' default.
KEYWORD_TENSORS = frozenset({"padding_mask"})


@dataclass(frozen=True)
class ReplayOp:
    op: str
    oracle: str  # "module:function" in reference/
    clause: str
    family: str  # the TOL-TABLE family
    tensors: tuple[str, ...]  # tensor arguments, in the oracle's positional order
    options: tuple[str, ...]  # keyword options
    outputs: tuple[str, ...]  # one name per output; more than one: the op returns a tuple
    # (inputs, options) -> the atol scale (None: the table unscaled), or a tuple of one per output
    atol_scale: Callable[[dict, dict], torch.Tensor | tuple | None] = lambda inputs, options: None
    # (inputs, options) -> bool [B, Sq] of the rows the clause compares (None: all)
    rows: Callable[[dict, dict], torch.Tensor | None] = lambda inputs, options: None
    # (generator, dtype) -> (inputs, options): a case for `export` without a capture (None: capture only)
    sample: Callable | None = None
    # tensor arguments the oracle takes by keyword (a None recorded as an option is passed as one)
    keywords: frozenset = KEYWORD_TENSORS
    # (inputs, options, outputs, *, clause, context) -> None, raising ConformanceError: judges
    # the outputs in place of the oracle comparison (routing: any slot order, ties; no allowance)
    judge: Callable | None = None
    # the tensor whose dtype picks the tolerance row (default: the first), or a dtype option
    dtype_from: str | None = None
    # options recorded by a dtype's name ("bfloat16": JSON), passed to the oracle and backends as the dtype
    dtype_options: tuple[str, ...] = ()
    # the refinements the row's judge also fails calls under (every case names them with ``clause``)
    judged_under: tuple[str, ...] = ()

    @property
    def clauses(self) -> list[str]:
        return [self.clause, *self.judged_under]

    def tolerance_dtype(self, inputs: dict, options: dict | None = None) -> torch.dtype | None:
        name = self.dtype_from or self.tensors[0]
        if name in self.dtype_options:  # never raises: a bad name fails the call where it is judged
            value = (options or {}).get(name)
            dtype = getattr(torch, value, None) if isinstance(value, str) else value
            return dtype if isinstance(dtype, torch.dtype) else None
        return inputs[name].dtype if name in inputs else None

    def call_options(self, options: dict) -> dict:
        """The options as the oracle and the backends take them: each of ``dtype_options`` recorded
        by its name becomes the torch.dtype (ValueError naming the option when it names none)."""
        called = dict(options)
        for name in self.dtype_options:
            value = called.get(name)
            if isinstance(value, str):
                dtype = getattr(torch, value, None)
                if not isinstance(dtype, torch.dtype):
                    raise ValueError(f"option {name}={value!r}: not the name of a torch dtype")
                called[name] = dtype
        return called

    def scales(self, inputs: dict, options: dict) -> list:
        """One atol scale (or None) per output."""
        scale = self.atol_scale(inputs, options)
        return list(scale) if isinstance(scale, tuple) else [scale] * len(self.outputs)

    def arguments(self, inputs: dict, options: dict) -> tuple[list, dict]:
        """The oracle's (or a backend's) positional tensors and keyword tensors of a recorded call."""
        args = [inputs[name] for name in self.tensors if name not in self.keywords]
        keywords = {n: inputs.get(n) for n in self.tensors if n in self.keywords and n not in options}
        return args, keywords

    def oracle_function(self):
        module, _, name = self.oracle.partition(":")
        return getattr(importlib.import_module(module), name)

    def expected(self, inputs: dict, options: dict) -> list[torch.Tensor]:
        """The oracle's outputs (float64) on the inputs as recorded (host copies)."""
        args, keywords = self.arguments({n: t.cpu() for n, t in inputs.items()}, options)
        out = self.oracle_function()(*args, **self.call_options(options), **keywords)
        return list(out) if isinstance(out, (tuple, list)) else [out]


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
        if op == "swiglu_oai_and_mul":  # ACT-SWIGLU-OAI's property: rounded steps over oai_up_scale
            return rounded_atol_scale(op, x, base=oai_up_scale(x, **opts), **opts)
        if op == "situ_and_mul":
            return situ_up_scale(x, **opts)
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
        _act(
            "swiglu_step_and_mul",
            "ACT-SWIGLU-STEP",
            ("limit",),
            sample=lambda g, d: (_gated(g, d), {"limit": 7.0}),
        ),  # fmt: skip
        _act(
            "situ_and_mul",
            "ACT-SITU",
            ("beta", "linear_beta"),
            sample=lambda g, d: (_gated(g, d), {"beta": 4.0, "linear_beta": 25.0}),
        ),  # fmt: skip
        _act(
            "silu_clamped_and_mul",
            "ACT-SILU-CLAMPED",
            ("limit",),
            sample=lambda g, d: (_gated(g, d), {"limit": 7.0}),
        ),  # fmt: skip
        _act(
            "swiglu_oai_and_mul",
            "ACT-SWIGLU-OAI",
            ("alpha", "limit", "interleaved"),
            sample=lambda g, d: (_gated(g, d), {"alpha": 1.702, "limit": 7.0, "interleaved": True}),
        ),  # fmt: skip
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
        *ops_more.ROWS(ReplayOp),
        *ops_quant.ROWS(ReplayOp),
    )
}

_CONFIG = "a config reader or flag mapping: nothing tensor-valued to record from a model's call"
# op -> why it is not replayable; an op gets a row above once it is.
NOT_REPLAYABLE: dict[str, str] = {
    "npu_geglu_args": _CONFIG,
    "npu_gelu_variant_args": _CONFIG,
    "swiglu_limit": _CONFIG,
    "encoder_attention_mask": "mask builder from integer arguments: exact, judged by its properties",
    "swa_decode_mask": "mask builder from integer arguments: exact, judged by its properties",
    "flash_attention_window": _CONFIG,
    "cann_prefill_tokens": _CONFIG,
    "decode_mask_window": _CONFIG,
    "dpm_scheduler": "returns a stateful scheduler object, not a tensor of one call",
    "layer_windows": _CONFIG,
    "window_kernel_args": _CONFIG,
    "append_shared_experts": "not judged by replay: MOE-SHARED compares slot ids exactly and the rows' "
    "judges are tolerances or routing's ties; an exact judge is not written",
    "moe_router_config": _CONFIG,
    "rope_inv_freq": _CONFIG,
    "rope_softmax_scale": _CONFIG,
    "rope_kernel_args": _CONFIG,
    **dict.fromkeys(
        ("fp8_quant", "fp8_group_quant", "fp8_block_scaled_mm", "fp8_fn_to_fnuz"),
        "a capture stores no fp8 tensor (store.SAFETENSORS_DTYPES has none) and no msprobe API maps to it",
    ),
    "quant_scheme": _CONFIG,
}
