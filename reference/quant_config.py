"""QUANT-CONFIG: the quant ops' parameters a model's ``quantization_config`` asks for.

``quant_scheme(config)`` takes a transformers config object or dict (its ``quantization_config``
read as a dict) or the ``quantization_config`` dict itself, and returns the scheme: which of
spec/quant.md's ops a checkpoint's linear layers run and with which parameters. Four checkpoint
kinds (spec/quant.md, QUANT-CONFIG's Sources): fp8 (DeepSeek-V3's 128 x 128 blocks, UE8M0 scales
with ``scale_fmt``), compressed-tensors W8A8 int8, AWQ and GPTQ int4. A field the scheme cannot
honour raises ValueError naming it (``quantization_config.<field>``).
"""

from __future__ import annotations

import numbers

import torch

from reference.quant_w4a16 import GROUP_SIZES

__all__ = ["METHODS", "quant_scheme"]

METHODS = ("fp8", "compressed-tensors", "awq", "gptq")


def _get(section: dict, name: str, default=..., *, where: str = "quantization_config"):
    if name in section and section[name] is not None:
        return section[name]
    if default is ...:
        raise ValueError(f"{where}.{name} is required, got none")
    return default


def _require(ok: bool, field: str, expected: str, value) -> None:
    if not ok:
        raise ValueError(f"quantization_config.{field} must be {expected}, got {value!r}")


def _int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _fp8(q: dict) -> dict:
    """QUANT-CONFIG, fp8: e4m3 values, dynamic or static activations; ``weight_block_size`` [bn, bk]:
    block weights (QUANT-FP8-BLOCK-MM) and 1 x bk activation groups (QUANT-FP8-GROUP), with
    ``scale_fmt: "ue8m0"`` power-of-two scales (QUANT-FP8-UE8M0)."""
    fmt = _get(q, "fmt", "e4m3")
    _require(fmt == "e4m3", "fmt", "'e4m3'", fmt)
    scheme = _get(q, "activation_scheme")
    _require(scheme in ("dynamic", "static"), "activation_scheme", "'dynamic' or 'static'", scheme)
    block = _get(q, "weight_block_size", None)
    if block is not None:
        pair = isinstance(block, list | tuple) and len(block) == 2 and all(_int(v) and v > 0 for v in block)
        _require(pair, "weight_block_size", "two positive ints [bn, bk]", block)
        _require(scheme == "dynamic", "activation_scheme", "'dynamic' with weight_block_size", scheme)
    scale_fmt = _get(q, "scale_fmt", None)
    _require(scale_fmt in (None, "ue8m0"), "scale_fmt", "'ue8m0' or absent", scale_fmt)
    return {
        "method": "fp8", "fp8_dtype": torch.float8_e4m3fn, "activation_scheme": scheme,
        "block_size": None if block is None else (int(block[0]), int(block[1])),
        "activation_group_size": None if block is None else int(block[1]), "use_ue8m0": scale_fmt == "ue8m0",
    }  # fmt: skip


def _compressed_tensors(q: dict) -> dict:
    """QUANT-CONFIG, compressed-tensors: the int8 W8A8 scheme of every config group (one scheme for
    all: 8-bit symmetric int weights per channel or tensor; 8-bit symmetric int activations,
    dynamic per token or static per tensor)."""
    groups = _get(q, "config_groups")
    _require(isinstance(groups, dict) and len(groups) > 0, "config_groups", "a non-empty dict", groups)
    schemes = set()
    for name, group in groups.items():
        where = f"quantization_config.config_groups.{name}"
        _require(isinstance(group, dict), f"config_groups.{name}", "a dict", group)
        weights, acts = _get(group, "weights", where=where), _get(group, "input_activations", where=where)
        parts = (
            ("weights", weights, ("channel", "tensor")),
            ("input_activations", acts, ("token", "tensor")),
        )
        for part, args, strategies in parts:
            _require(isinstance(args, dict), f"config_groups.{name}.{part}", "a dict", args)
            field = f"config_groups.{name}.{part}"
            _require(args.get("num_bits") == 8 and args.get("type") == "int", f"{field}.num_bits/type",
                     "8 / 'int' (W8A8 int8)", (args.get("num_bits"), args.get("type")))  # fmt: skip
            _require(args.get("symmetric", True) is True, f"{field}.symmetric", "true", args.get("symmetric"))
            _require(args.get("strategy") in strategies, f"{field}.strategy", f"one of {strategies}",
                     args.get("strategy"))  # fmt: skip
        dynamic = bool(acts.get("dynamic", False))
        _require(dynamic == (acts["strategy"] == "token"), f"config_groups.{name}.input_activations.dynamic",
                 "true exactly for strategy 'token'", acts.get("dynamic"))  # fmt: skip
        schemes.add((weights["strategy"], acts["strategy"]))
    _require(len(schemes) == 1, "config_groups", "one W8A8 scheme for every group", sorted(schemes))
    (weight, activation), = schemes  # fmt: skip
    ignored = tuple(_get(q, "ignore", ()))
    return {"method": "w8a8-int8", "weight_scales": weight, "activation_scales": activation,
            "dynamic_activations": activation == "token", "ignored": ignored}  # fmt: skip


def _int4(q: dict, method: str) -> dict:
    """QUANT-CONFIG, AWQ / GPTQ: 4-bit groups of 32, 64 or 128 (QUANT-W4A16-GROUPS); GPTQ's
    ``checkpoint_format`` "gptq_v2" stores the zeros themselves (QUANT-W4A16-ZEROS)."""
    bits = _get(q, "bits") if "bits" in q else _get(q, "w_bit")
    _require(bits == 4, "bits", "4 (w4a16_mm)", bits)
    group = _get(q, "group_size") if "group_size" in q else _get(q, "q_group_size")
    _require(_int(group) and group in GROUP_SIZES, "group_size", f"one of {GROUP_SIZES}", group)
    if method == "awq":
        _require(_get(q, "zero_point", True) is True, "zero_point", "true (AWQ's asymmetric groups)",
                 q.get("zero_point"))  # fmt: skip
        return {"method": "w4a16", "packing": "awq", "group_size": int(group)}
    _require(_get(q, "desc_act", False) is False, "desc_act", "false (w4a16_mm has no act-order g_idx)",
             q.get("desc_act"))  # fmt: skip
    fmt = _get(q, "checkpoint_format", "gptq")
    _require(fmt in ("gptq", "gptq_v2"), "checkpoint_format", "'gptq' or 'gptq_v2'", fmt)
    return {"method": "w4a16", "packing": fmt, "group_size": int(group)}


def quant_scheme(config) -> dict:
    """QUANT-CONFIG: the scheme of a model config (object or dict) or of its quantization_config."""
    if isinstance(config, dict) and "quant_method" in config:
        q = config
    else:
        q = (
            config.get("quantization_config")
            if isinstance(config, dict)
            else getattr(config, "quantization_config", None)
        )
        if q is not None and not isinstance(q, dict):
            q = q.to_dict() if hasattr(q, "to_dict") else q
    if not isinstance(q, dict):
        raise ValueError(f"config.quantization_config must be a dict, got {type(q).__name__}")
    method = q.get("quant_method")
    _require(method in METHODS, "quant_method", f"one of {METHODS}", method)
    if method == "fp8":
        return _fp8(q)
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    return _int4(q, method)
