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

MISTRAL_7B = ModelProfile(
    name="mistral-7b",
    title="Mistral-7B-v0.1",
    clause="MODEL-MISTRAL7B",
    config_class="transformers.MistralConfig",
    config={
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "sliding_window": 4096,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "vocab_size": 32000,
    },
    source="mistralai/Mistral-7B-v0.1 config.json as rendered by two third parties (not transformers' "
    "MistralConfig defaults: eps 1e-6, 131072 positions); spec/models.md MODEL-MISTRAL7B",
)

GEMMA3_1B = ModelProfile(
    name="gemma3-1b",
    title="Gemma3-1B",
    clause="MODEL-GEMMA3",
    config_class="transformers.Gemma3TextConfig",
    config={
        "num_hidden_layers": 26,
        "hidden_size": 1152,
        "intermediate_size": 6912,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
        "query_pre_attn_scalar": 256,
        "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 32768,
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        },
    },
    source="google/gemma-3-1b config.json as copied into hub derivatives; spec/models.md MODEL-GEMMA3",
)

LLAMA31_8B = ModelProfile(
    name="llama3.1-8b",
    title="Llama-3.1-8B",
    clause="MODEL-LLAMA31",
    config_class="transformers.LlamaConfig",
    config={
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },  # fmt: skip
        "vocab_size": 128256,
    },
    source="meta-llama/Llama-3.1-8B config.json as copied into hub derivatives (not LlamaConfig's "
    "defaults, which are Llama-2-7B's); spec/models.md MODEL-LLAMA31",
)

QWEN3_8B = ModelProfile(
    name="qwen3-8b",
    title="Qwen3-8B",
    clause="MODEL-QWEN3",
    config_class="transformers.Qwen3Config",
    config={
        "num_hidden_layers": 36,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "max_window_layers": 36,
        "use_sliding_window": False,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "vocab_size": 151936,
    },
    source="Qwen/Qwen3-8B config.json as copied into a hub repository; spec/models.md MODEL-QWEN3",
)

QWEN3_30B_A3B = ModelProfile(
    name="qwen3-30b-a3b",
    title="Qwen3-30B-A3B",
    clause="MODEL-QWEN3-MOE",
    config_class="transformers.Qwen3MoeConfig",
    config={
        "num_hidden_layers": 48,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "vocab_size": 151936,
    },
    source="Ascend MindSpeed-RL configs/model/qwen3_30b_a3b.yaml (rms_norm_eps: Qwen3MoeConfig's "
    "default); spec/models.md MODEL-QWEN3-MOE",
)

DEEPSEEK_V3 = ModelProfile(
    name="deepseek-v3",
    title="DeepSeek-V3",
    clause="MODEL-DEEPSEEK-V3",
    config_class="transformers.DeepseekV3Config",
    config={
        "num_hidden_layers": 61,
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "max_position_embeddings": 163840,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 40.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
        },  # fmt: skip
        "n_routed_experts": 256,
        "num_experts_per_tok": 8,
        "n_group": 8,
        "topk_group": 4,
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "first_k_dense_replace": 3,
        "vocab_size": 129280,
        # MODEL-QUANT: the published checkpoint's fp8 blocks (QUANT-CONFIG's DeepSeek-V3 line)
        "quantization_config": {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
        },
    },  # fmt: skip
    source="deepseek-ai/DeepSeek-V3-Base config.json as quoted by a third party, DeepseekV3Config's "
    "defaults for the MoE fields and MLA ranks; spec/models.md MODEL-DEEPSEEK-V3",
)

GPT_OSS_20B = ModelProfile(
    name="gpt-oss-20b",
    title="gpt-oss-20b",
    clause="MODEL-GPT-OSS",
    config_class="transformers.GptOssConfig",
    config={
        "num_hidden_layers": 24,
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "sliding_window": 128,
        "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(24)],
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 150000.0,
            "factor": 32.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "original_max_position_embeddings": 4096,
            "truncate": False,
        },  # fmt: skip
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "swiglu_limit": 7.0,
        "vocab_size": 201088,
    },
    source="openai/gpt-oss-20b config.json as copied into hub derivatives, NVIDIA Megatron Bridge's "
    "and Keras Hub's gpt-oss-20b configurations; spec/models.md MODEL-GPT-OSS",
)

QWEN2_VL_7B = ModelProfile(
    name="qwen2-vl-7b",
    title="Qwen2-VL-7B-Instruct (language model)",
    clause="MODEL-QWEN2-VL",
    config_class="transformers.Qwen2VLTextConfig",
    config={
        "num_hidden_layers": 28,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "max_position_embeddings": 32768,
        "use_sliding_window": False,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
        "vocab_size": 152064,
    },
    source="Qwen/Qwen2-VL-7B-Instruct-GPTQ-Int8 config.json (the Qwen organisation's own copy of the "
    "7B config); spec/models.md MODEL-QWEN2-VL",
)

# MODEL-QWEN3-W8A8: Qwen3-8B's layers, every linear layer but lm_head int8 (compressed-tensors W8A8:
# per-channel weight scales, dynamic per-token activations), as QUANT-CONFIG's W8A8 line.
_W8A8_INT8 = {"num_bits": 8, "type": "int", "symmetric": True}
QWEN3_8B_W8A8 = ModelProfile(
    name="qwen3-8b-w8a8",
    title="Qwen3-8B W8A8 (int8, compressed-tensors)",
    clause="MODEL-QWEN3-W8A8",
    config_class="transformers.Qwen3Config",
    config={
        **QWEN3_8B.config,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "int-quantized",
            "ignore": ["lm_head"],
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {**_W8A8_INT8, "strategy": "channel", "dynamic": False},
                    "input_activations": {**_W8A8_INT8, "strategy": "token", "dynamic": True},
                }
            },
        },
    },  # fmt: skip
    source="MODEL-QWEN3's config; the compressed-tensors W8A8 group of spec/quant.md QUANT-CONFIG (a Qwen3 "
    "int8 dynamic checkpoint's card gives the same scheme); spec/models.md MODEL-QWEN3-W8A8",
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
    # the encoder's mask and its windows' kernel converters at the encoder's windows (MODEL-SANA);
    # the DiT's GLUMBConv gate: width int(2.5 * 2240) = 5600 (benchmarks/cases.py, inferred)
    ops=(
        ("encoder_attention_mask", "text-encoder", {}),
        ("flash_attention_window", "text-encoder", {}),
        ("cann_prefill_tokens", "text-encoder", {}),
        ("prefill_attention", "text-encoder", {}),
        ("silu_and_mul", "dit", {"width": 5600}),
    ),
)
# DPM-CONFIG's SANA line: these three keys, the rest diffusers' DPMSolverMultistepScheduler defaults.
SANA_SCHEDULER = {"prediction_type": "flow_prediction", "use_flow_sigmas": True, "flow_shift": 3.0}

BUILTIN: dict[str, ModelProfile] = {p.name: p for p in (
    STEP3P5, GEMMA2_2B, GEMMA3_1B, MISTRAL_7B, LLAMA31_8B, QWEN3_8B, QWEN3_8B_W8A8, QWEN3_30B_A3B,
    DEEPSEEK_V3, GPT_OSS_20B, QWEN2_VL_7B, SANA)}  # fmt: skip
