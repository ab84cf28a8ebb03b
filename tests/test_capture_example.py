"""The worked example of docs/capture.md (Walk-through): a 2-layer Llama built from its config
(random weights, no download) runs on CPU with capture on its activations, norms and attention;
layer 1's activation is swapped for a realistic wrong kernel (erf GELU where the config asks for
the tanh form); ``opconform replay``, in a process that imports no model code, flags exactly
that layer's calls under ACT-GELU-VARIANTS and passes every other call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
transformers = pytest.importorskip("transformers")


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, hidden_act="gelu_new", max_position_embeddings=64, rms_norm_eps=1e-6,
        initializer_range=0.5,  # activations of order 1 (0.02 keeps the GELUs where erf and tanh agree)
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _attach(capture, model):
    """The mappings a user writes: each layer's call -> the protocol op and its arguments."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import sdpa_mask

    for i, layer in enumerate(model.model.layers):
        capture.attach(
            layer.mlp.act_fn, "new_gelu", lambda m, a, k: {"x": a[0]}, name=f"model.layers.{i}.mlp.act_fn"
        )
        for norm in ("input_layernorm", "post_attention_layernorm"):
            capture.attach(
                getattr(layer, norm), "rms_norm",
                lambda m, a, k: {"x": a[0], "weight": m.weight, "eps": m.variance_epsilon},
                name=f"model.layers.{i}.{norm}",
            )  # fmt: skip
    attention = capture.wrap(
        sdpa_attention_forward, "prefill_attention",
        lambda module, q, k, v, mask, **kw: {
            "q": q, "k": k, "v": v, "sliding_window": None, "padding_mask": None, "scale": kw["scaling"]
        },
        name=lambda module, *a, **k: f"model.layers.{module.layer_idx}.self_attn",
        output=lambda result: result[0].transpose(1, 2),  # [B, S, H, D] -> the op's [B, H, S, D]
    )  # fmt: skip
    AttentionInterface.register("opconform_capture", attention)
    AttentionMaskInterface.register("opconform_capture", sdpa_mask)
    model.config._attn_implementation = "opconform_capture"


def test_replay_flags_exactly_the_swapped_layer(tmp_path):
    from opconform.capture import Capture

    model = _model()
    model.model.layers[1].mlp.act_fn = torch.nn.GELU()  # the wrong kernel: erf GELU for gelu_new
    tokens = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = model(tokens).logits
        with Capture(tmp_path / "capture", source="cpu-port") as capture:
            _attach(capture, model)
            captured = model(tokens).logits
            model(tokens)
        model.config._attn_implementation = "sdpa"
    assert torch.equal(plain, captured), "capture changed the model's outputs"

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script = "import sys; from opconform.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = ["replay", str(tmp_path / "capture"), "--out", str(tmp_path / "report")]
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    layers = {r["nodeid"].split("::")[1] for r in report["results"]}
    assert len(report["results"]) == 2 * 2 * 4 and len(layers) == 8  # 2 forwards x 2 layers x 4 captures
    failed = sorted(r["nodeid"] for r in report["results"] if r["outcome"] == "failed")
    assert failed == [f"replay::model.layers.1.mlp.act_fn::call{i}::new_gelu" for i in range(2)], failed
    assert all(
        r["failure"]["clause"] == "ACT-GELU-VARIANTS" for r in report["results"] if r["outcome"] == "failed"
    )
    assert {r["outcome"] for r in report["results"] if r["nodeid"] not in failed} == {"passed"}
