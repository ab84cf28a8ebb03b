"""The built-in model profiles (spec/models.md): each one's published config fields and source.

Only the fields a profile derives from are written out; the rest stay the config class's
defaults (the clause says which). A model whose numbers no source read for this repository
gives is left out (spec/models.md, MODEL-LEFT-OUT) rather than guessed.
"""

from __future__ import annotations

from conformance.models.profile import ModelProfile

# MODEL-STEP3P5: 45 layers + 3 MTP layers in config.json's lists; full attention every 4th layer
# (3:1 sliding:full), rope_theta 5e6 on full and 1e4 on sliding layers, window 512.
_STEP_LAYERS = 45 + 3
_STEP_FULL = [i % 4 == 0 for i in range(_STEP_LAYERS)]

STEP3P5 = ModelProfile(
    name="step3p5",
    title="Step-3.5-Flash",
    clause="MODEL-STEP3P5",
    config_class="transformers.Step3p7TextConfig",
    config={
        "num_hidden_layers": 45,
        "num_nextn_predict_layers": 3,
        "hidden_size": 4096,
        "num_attention_heads": 64,
        "num_attention_groups": 8,
        "head_dim": 128,
        "layer_types": ["full_attention" if full else "sliding_attention" for full in _STEP_FULL],
        "sliding_window": 512,
        "attention_other_setting": {"num_attention_heads": 96, "num_attention_groups": 8},
        "rope_theta": [5000000.0 if full else 10000.0 for full in _STEP_FULL],
        "partial_rotary_factors": [0.5 if full else 1.0 for full in _STEP_FULL],
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-5,
        "moe_num_experts": 288,
        "moe_top_k": 8,
        "moe_intermediate_size": 1280,
        "share_expert_dim": 1280,
        "moe_layers_enum": ",".join(str(i) for i in range(3, 45)),
        "vocab_size": 128896,
    },
    source="stepfun-ai/Step-3.5-Flash README (fabede3) and hub config.json as rendered by third "
    "parties; spec/models.md MODEL-STEP3P5",
)

GEMMA2_2B = ModelProfile(
    name="gemma2-2b",
    title="Gemma2-2B",
    clause="MODEL-GEMMA2",
    config_class="transformers.Gemma2Config",
    config={
        "num_hidden_layers": 26,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "sliding_window": 4096,
        "attn_logit_softcapping": 50.0,
        "query_pre_attn_scalar": 256,
        "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 8192,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    },
    source="google/gemma-2-2b config.json as rendered by a third party, equal to transformers 5.24 "
    "Gemma2Config's defaults; spec/models.md MODEL-GEMMA2",
)

# MODEL-SANA: the text encoder is GEMMA2_2B; the DiT's gate and the scheduler are added.
SANA = ModelProfile(
    name="sana",
    title="SANA 1.6B pipeline (Gemma2-2B text encoder, DiT, DPM-Solver++)",
    clause="MODEL-SANA",
    config_class="transformers.Gemma2Config",
    config=GEMMA2_2B.config,
    source="spec/scheduler.md DPM-CONFIG (SANA's scheduler), MODEL-GEMMA2 (its text encoder); "
    "spec/models.md MODEL-SANA",
    ops=(("encoder_attention_mask", "text-encoder"), ("prefill_attention", "text-encoder"),
         ("silu_and_mul", "dit")),
)
# DPM-CONFIG's SANA line: these three keys, the rest diffusers' DPMSolverMultistepScheduler defaults.
SANA_SCHEDULER = {"prediction_type": "flow_prediction", "use_flow_sigmas": True, "flow_shift": 3.0}

BUILTIN: dict[str, ModelProfile] = {p.name: p for p in (STEP3P5, GEMMA2_2B, SANA)}
