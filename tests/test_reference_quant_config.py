"""QUANT-CONFIG: real checkpoints' quantization_config fields (transcribed, spec/quant.md's Sources)
read into the ops' parameters, and bad configs rejected in one line naming the field."""

from __future__ import annotations

import types

import pytest
import torch

from reference.quant_config import quant_scheme

# DeepSeek-V3's published config; V3.2 / V4 add "scale_fmt": "ue8m0".
DEEPSEEK_V3 = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "weight_block_size": [128, 128],
}
_INT8 = {"num_bits": 8, "type": "int", "symmetric": True, "group_size": None, "actorder": None}
W8A8_INT8 = {
    "config_groups": {"group_0": {
        "input_activations": {**_INT8, "dynamic": True, "strategy": "token", "observer": "memoryless"},
        "output_activations": None, "targets": ["Linear"],
        "weights": {**_INT8, "dynamic": False, "strategy": "channel", "observer": "minmax"},
    }},
    "format": "int-quantized", "ignore": ["lm_head"], "kv_cache_scheme": None,
    "quant_method": "compressed-tensors", "quantization_status": "compressed",
}  # fmt: skip
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True,
       "modules_to_not_convert": ["mlp.gate."]}  # fmt: skip
GPTQ = {
    "bits": 4,
    "damp_percent": 0.01,
    "desc_act": False,
    "group_size": 128,
    "quant_method": "gptq",
    "sym": True,
}


def test_deepseek_v3_fp8_blocks():
    assert quant_scheme({"model_type": "deepseek_v3", "quantization_config": DEEPSEEK_V3}) == {
        "method": "fp8", "fp8_dtype": torch.float8_e4m3fn, "activation_scheme": "dynamic",
        "block_size": (128, 128), "activation_group_size": 128, "use_ue8m0": False,
    }  # fmt: skip
    ue8m0 = quant_scheme(types.SimpleNamespace(quantization_config={**DEEPSEEK_V3, "scale_fmt": "ue8m0"}))
    assert ue8m0["use_ue8m0"] and ue8m0["block_size"] == (128, 128)
    tensor = quant_scheme({"quant_method": "fp8", "activation_scheme": "static"})
    assert tensor["block_size"] is None and tensor["activation_scheme"] == "static"


def test_compressed_tensors_w8a8_int8():
    assert quant_scheme({"quantization_config": W8A8_INT8}) == {
        "method": "w8a8-int8", "weight_scales": "channel", "activation_scales": "token",
        "dynamic_activations": True, "ignored": ("lm_head",),
    }  # fmt: skip


def test_awq_and_gptq_packings():
    assert quant_scheme(AWQ) == {"method": "w4a16", "packing": "awq", "group_size": 128}
    assert quant_scheme(GPTQ) == {"method": "w4a16", "packing": "gptq", "group_size": 128}
    v2 = quant_scheme({**GPTQ, "checkpoint_format": "gptq_v2", "group_size": 32})
    assert v2 == {"method": "w4a16", "packing": "gptq_v2", "group_size": 32}


def _group(**weights):
    group = W8A8_INT8["config_groups"]["group_0"]
    return {**W8A8_INT8, "config_groups": {"group_0": {**group, "weights": {**group["weights"], **weights}}}}


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"quant_method": "bitsandbytes"}, "quant_method"),
        ({**DEEPSEEK_V3, "fmt": "e5m2"}, "fmt"),
        ({**DEEPSEEK_V3, "weight_block_size": [128]}, "weight_block_size"),
        ({**DEEPSEEK_V3, "activation_scheme": None}, "activation_scheme"),
        ({**DEEPSEEK_V3, "scale_fmt": "e8m0"}, "scale_fmt"),
        (_group(symmetric=False), "symmetric"),
        (_group(type="float"), "num_bits/type"),
        (_group(strategy="group"), "strategy"),
        ({**AWQ, "bits": 8}, "bits"),
        ({**AWQ, "group_size": -1}, "group_size"),
        ({**GPTQ, "desc_act": True}, "desc_act"),
        ({**GPTQ, "checkpoint_format": "marlin"}, "checkpoint_format"),
        ({"model_type": "llama"}, "quantization_config"),
    ],
)
def test_bad_configs_raise_one_line_naming_the_field(config, field):
    with pytest.raises(ValueError, match=field.replace("/", ".")) as raised:
        quant_scheme(config)
    assert "\n" not in str(raised.value)


def test_reads_transformers_config_objects():
    """The reader takes the config object transformers builds (its quantization_config a dict)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.DeepseekV3Config(quantization_config=DEEPSEEK_V3)
    assert quant_scheme(config)["block_size"] == (128, 128)
    with pytest.raises(ValueError, match="quantization_config must be a dict"):
        quant_scheme(transformers.Qwen3Config())
