"""Make an msprobe dump on CPU for tests/test_replay_msprobe.py: ``python tests/msprobe_dumps.py DUMP_PATH``.

Run in its own process: msprobe's PrecisionDebugger is a process-wide singleton that patches
torch's APIs. msprobe itself writes everything (task tensor, level mix, one step):

- a tiny transformers Llama (sdpa attention) ported the Ascend way: its RMSNorm layers call
  ``npu_rms_norm`` and its MLP ``npu_swiglu`` on the fused gate/up halves. The torch_npu ops are
  the emulator's (``backends.npu_emulator``) registered with msprobe under the ``NPU`` prefix
  through msprobe's own ``PrecisionDebugger.register_custom_api``, so their records carry the
  names and format msprobe gives torch_npu's APIs. The PLANTED wrong kernel: ``npu_rms_norm``
  computed in bfloat16 end to end (mutant ``rms-norm-bf16-compute``), called by the model's
  three norms (``NPU.npu_rms_norm.0/1/2.forward``), nowhere else;
- calls of the other mapped APIs with correct kernels (``CORRECT_CALLS``; the W8A8 pair
  ``npu_dynamic_quant`` then ``npu_quant_matmul`` on its int8 output and per-token scale), and calls
  of mapped APIs outside their contract op (``OUTSIDE_CALLS``).
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F

PLANTED = ["NPU.npu_rms_norm.0.forward", "NPU.npu_rms_norm.1.forward", "NPU.npu_rms_norm.2.forward"]
# record name -> the op it maps to; every one is computed right
CORRECT_CALLS = {
    "NPU.npu_swiglu.0.forward": "silu_and_mul",
    "Functional.scaled_dot_product_attention.0.forward": "attention",
    "NPU.npu_add_rms_norm.0.forward": "fused_add_rms_norm",
    "NPU.npu_geglu.0.forward": "gelu_and_mul",
    "NPU.npu_geglu.1.forward": "gelu_and_mul",
    "NPU.npu_moe_gating_top_k_softmax.0.forward": "select_experts",
    "Functional.gelu.0.forward": "new_gelu",
    "Functional.scaled_dot_product_attention.1.forward": "attention",
    "Functional.rms_norm.0.forward": "rms_norm",
    "NPU.npu_mrope.0.forward": "rotary_embedding",
    "NPU.npu_mrope.1.forward": "mrope",
    "NPU.npu_rotary_mul.0.forward": "rotary_embedding",
    "NPU.npu_apply_rotary_pos_emb.0.forward": "rotary_embedding",
    "NPU.npu_fused_infer_attention_score.0.forward": "attention",
    "NPU.npu_dynamic_quant.0.forward": "dynamic_int8_quant",
    "NPU.npu_quant_matmul.0.forward": "int8_scaled_mm",
}
OUTSIDE_CALLS = ["Functional.gelu.1.forward", "Functional.scaled_dot_product_attention.2.forward"]
OUTSIDE_CALLS += ["NPU.npu_dynamic_quant.1.forward", "NPU.npu_quant_matmul.1.forward"]
NPU_APIS = ("npu_rms_norm", "npu_add_rms_norm", "npu_swiglu", "npu_geglu", "npu_moe_gating_top_k_softmax")
NPU_APIS += ("npu_mrope", "npu_rotary_mul", "npu_apply_rotary_pos_emb", "npu_fused_infer_attention_score")
NPU_APIS += ("npu_dynamic_quant", "npu_quant_matmul")
NPU_APIS += ("_npu_reshape_and_cache",)  # no contract op's call: it writes its caches, returns nothing


def _planted_rms_norm(self, gamma, epsilon=1e-6):
    from backends.npu_emulator import npu_rms_norm
    from mutants.norms import RmsNormBf16Compute

    _, rstd = npu_rms_norm(self, gamma, epsilon)
    return RmsNormBf16Compute().rms_norm(self, gamma, eps=epsilon), rstd


def _tiny_llama(npu):
    import transformers
    from transformers.models.llama import modeling_llama

    config = transformers.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=32, attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    for module in model.modules():
        if isinstance(module, modeling_llama.LlamaRMSNorm):
            module.weight.data = 1 + 0.2 * torch.randn(16)

    def norm_forward(self, x):
        return npu.npu_rms_norm(x, self.weight, self.variance_epsilon)[0]

    def mlp_forward(self, x):
        gate_up = torch.cat([self.gate_proj(x), self.up_proj(x)], dim=-1)  # a merged gate_up projection
        return self.down_proj(npu.npu_swiglu(gate_up, dim=-1))

    for cls, forward in ((modeling_llama.LlamaRMSNorm, norm_forward), (modeling_llama.LlamaMLP, mlp_forward)):
        for module in model.modules():
            if isinstance(module, cls):
                module.forward = types.MethodType(forward, module)
    return model


def main(dump_path: str) -> None:
    from msprobe.pytorch import PrecisionDebugger

    from backends import npu_emulator

    config = Path(dump_path).with_suffix(".config.json")
    config.write_text(json.dumps({"task": "tensor", "level": "mix", "dump_path": dump_path,
                                  "tensor": {"data_mode": ["all"]}}))  # fmt: skip
    npu = types.SimpleNamespace(**{name: getattr(npu_emulator, name) for name in NPU_APIS})
    npu.__name__ = "torch_npu"
    npu.npu_rms_norm = _planted_rms_norm
    debugger = PrecisionDebugger(config_path=str(config))
    for name in NPU_APIS:
        PrecisionDebugger.register_custom_api(npu, name, api_prefix="NPU")
    PrecisionDebugger.register_custom_api(F, "rms_norm", api_prefix="Functional")  # not in msprobe's list
    model = _tiny_llama(npu)
    g = torch.Generator().manual_seed(1)
    debugger.start(model)
    with torch.no_grad():
        model(torch.tensor([[1, 5, 9, 2, 7]]))
        bf16 = [torch.randn(3, 16, generator=g).to(torch.bfloat16) for _ in range(2)]
        npu.npu_add_rms_norm(*bf16, (1 + 0.1 * torch.randn(16, generator=g)).to(torch.bfloat16), 1e-5)
        npu.npu_geglu(torch.randn(2, 8, generator=g) * 3, dim=-1, approximate=1)  # y = left * gelu(right)
        npu.npu_geglu(torch.randn(2, 8, generator=g) * 3, approximate=0, activate_left=True)
        npu.npu_moe_gating_top_k_softmax(torch.randn(4, 8, generator=g), None, k=2)
        F.gelu(torch.randn(2, 8, generator=g) * 3, approximate="tanh")
        q, k, v = (torch.randn(1, 4, 3, 8, generator=g) for _ in range(3))
        keep = torch.rand(3, 3, generator=g) > 0.3
        F.scaled_dot_product_attention(q, k[:, :2], v[:, :2], attn_mask=keep, enable_gqa=True, scale=0.3)
        F.rms_norm(torch.randn(2, 8, generator=g), (8,), torch.randn(8, generator=g), 1e-5)
        angles = torch.arange(16.0)[:, None] * 10000.0 ** (-torch.arange(0, 8, 2) / 8)
        cache = torch.cat([angles.cos(), angles.sin()], dim=-1)  # rows cat(cos, sin), rotary dim 8
        rq, rk = torch.randn(4, 2 * 8, generator=g), torch.randn(4, 8, generator=g)
        npu.npu_mrope(torch.tensor([0, 3, 7, 15]), rq, rk, cache, 8, mrope_section=[0, 0, 0])
        sections = torch.randint(0, 16, (3, 4), generator=g)
        npu.npu_mrope(sections, rq, rk, cache, 8, mrope_section=[2, 1, 1], rotary_mode="interleave")
        r1, r2 = (t[[0, 3, 7, 15]][None, :, None] for t in (angles.cos(), angles.sin()))  # BSND, 1 head
        r1, r2 = torch.cat([r1, r1], -1), torch.cat([r2, r2], -1)  # full width, "half" mode
        npu.npu_rotary_mul(torch.randn(1, 4, 2, 8, generator=g), r1, r2)
        npu.npu_apply_rotary_pos_emb(
            torch.randn(1, 4, 2, 8, generator=g), torch.randn(1, 4, 1, 8, generator=g), r1, r2
        )
        masked = torch.ones(3, 3, dtype=torch.bool).triu(1)  # True = masked out (CANN-FIA-MASK)
        npu.npu_fused_infer_attention_score(
            q, k[:, :2], v[:, :2], atten_mask=masked, num_heads=4, num_key_value_heads=2, scale=0.3,
            input_layout="BNSD",
        )  # fmt: skip
        caches = [torch.zeros(2, 4, 1, 8, dtype=torch.float16) for _ in range(2)]
        kv = [torch.randn(3, 1, 8, generator=g).half() for _ in range(2)]
        npu._npu_reshape_and_cache(*kv, *caches, torch.tensor([0, 5, 2], dtype=torch.int32))
        x = torch.randn(3, 16, generator=g).to(torch.bfloat16)  # W8A8: per-token int8, then the GEMM
        y, token_scale = npu.npu_dynamic_quant(x)
        w, w_scale = (
            torch.randint(-127, 128, (16, 4), generator=g, dtype=torch.int8),
            torch.rand(4, generator=g),
        )
        bias = torch.randn(4, generator=g).to(torch.bfloat16)
        npu.npu_quant_matmul(
            y, w, w_scale / 100, pertoken_scale=token_scale, bias=bias, output_dtype=torch.bfloat16
        )
        npu.npu_dynamic_quant(x, smooth_scales=torch.ones(16, dtype=torch.bfloat16))  # SmoothQuant: outside
        npu.npu_quant_matmul(
            y, w, w_scale, bias=bias.int(), output_dtype=torch.bfloat16
        )  # int32 bias: outside
        F.gelu(torch.randn(2, 8, generator=g))  # erf GELU alone: no contract op
        F.scaled_dot_product_attention(q, k, v, attn_mask=torch.randn(3, 3, generator=g))  # a bias
    debugger.stop()
    debugger.step()


if __name__ == "__main__":
    main(sys.argv[1])
