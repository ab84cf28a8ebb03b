"""Conformance property for spec/quant.md's QUANT-CONFIG: a backend's reader of a model's
quantization_config gives the parameters the oracle's does, for the field's checkpoint kinds
(DeepSeek-V3 fp8 blocks, their UE8M0 successors, compressed-tensors W8A8 int8, AWQ, GPTQ v1 / v2)
and for each with an optional field left out."""

from __future__ import annotations

import pytest

from conformance.checks import check
from reference import quant_config as oracle

_INT8 = {"num_bits": 8, "type": "int", "symmetric": True}
_W8A8_GROUP = {"targets": ["Linear"], "weights": {**_INT8, "strategy": "channel", "dynamic": False},
               "input_activations": {**_INT8, "strategy": "token", "dynamic": True}}  # fmt: skip
CONFIGS = {
    "deepseek-v3-fp8": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                        "weight_block_size": [128, 128]},
    "deepseek-v3.2-fp8-ue8m0": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
    "fp8-per-tensor-static": {"activation_scheme": "static", "quant_method": "fp8"},
    "w8a8-int8": {"quant_method": "compressed-tensors", "format": "int-quantized", "ignore": ["lm_head"],
                  "config_groups": {"group_0": _W8A8_GROUP}},
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True},
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True},
    "gptq-v2-g32": {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False,
                    "checkpoint_format": "gptq_v2"},
}  # fmt: skip
OPTIONAL = ("fmt", "scale_fmt", "weight_block_size", "ignore", "zero_point", "desc_act", "checkpoint_format")


def _cases():
    """Each config as a model config's field and, left-out fields' forms, as the bare
    quantization_config (the reader takes both)."""
    for name, config in CONFIGS.items():
        yield pytest.param({"model_type": "deepseek_v3", "quantization_config": config}, id=name)
        for field in OPTIONAL:
            if field in config:
                yield pytest.param({k: v for k, v in config.items() if k != field}, id=f"{name}-no-{field}")


@pytest.mark.clause("QUANT-CONFIG")
@pytest.mark.op("quant_scheme")
@pytest.mark.parametrize("config", _cases())
def test_quant_scheme_of_a_config(backend, device, config):
    """The scheme of each checkpoint kind, optional fields at their documented defaults."""
    got = backend.quant_scheme(config)
    want = oracle.quant_scheme(config)
    check(got == want, clause="QUANT-CONFIG",
          message=f"quant_scheme({config}) on {backend.name!r}: {got}, expected {want}")  # fmt: skip
