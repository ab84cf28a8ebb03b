"""The bench cases: ops at shapes from the two field models, in a full and a quick shape set.

Sizes and where they come from (assumptions are marked as such):

- SANA text encoder = Gemma2-2B: hidden 2304, MLP intermediate 9216 with a tanh-GELU gate
  (``gelu_pytorch_tanh``), 8 query / 4 key-value heads of dim 256, sliding_window 4096;
  prompts padded to S = 300 tokens; batch 2 (classifier-free guidance).
- SANA 1.6B DiT: width 2240, GLUMBConv expand ratio 2.5, so the gated width is
  int(2.5 * 2240) = 5600 (the conv emits 2 * 5600 channels); 1024 px images give a 32 x 32
  latent (DC-AE, 32x down, 32 channels) = 1024 tokens. The DiT gates with SiLU; the GEGLU
  case at that width measures the same size with the GEGLU op.
- SANA scheduler: DPM-Solver++ with flow sigmas, flow_shift 3.0 (6.0 at 4096 px), 20 steps,
  latent [2, 32, 32, 32] (1024 px) and [2, 32, 128, 128] (4096 px).
- Step-3.5-Flash: sliding window W = 512; MoE expert intermediate 1280 (so 2 * 1280 gated
  input), 8 experts per token, dense MLP intermediate 11264, hidden 4096, 64 query / 8 kv
  heads of dim 128. ASSUMPTION: these are the defaults of transformers' ``Step3p7`` text
  config (the Step-3.5 family in transformers), taken to match Step-3.5-Flash.
- Prefill attention uses the oracle target's shape (Hq 32, Hkv 8, D 128; docs/performance.md): one
  tensor-parallel shard of 64/8 heads on 2 ranks. Decode uses Hq 8, Hkv 1 (one rank of an
  8-way tensor-parallel split), B 64 over a 32k cache: the full 8 kv heads would need 8 GiB
  of bf16 cache (32 GiB in the float64 oracle), more than a CPU benchmark machine holds.
- Serving attention (spec/serving.md): the shapes and their interpretation are in
  ``benchmarks/serving_cases.py``; the norms (spec/norms.md) in ``benchmarks/norm_cases.py``;
  the rope cases (spec/rope.md) in ``benchmarks/rope_cases.py``; the quant cases (spec/quant.md) in
  ``benchmarks/quant_cases.py``.

A case's inputs are built inside the worker process by ``make_inputs(params, device, dtype)``
and called through ``make_call(op, inputs)``, so the timed region is exactly the op call.
"""

from __future__ import annotations

import math

import torch

from benchmarks.case_types import FAMILIES, GIB, SHAPE_SETS, Case, Target
from benchmarks.kv_cache_cases import KV_CACHE_CASES
from benchmarks.moe_cases import MOE_CASES
from benchmarks.norm_cases import NORM_CASES
from benchmarks.pool_read_cases import POOL_READ_CASES
from benchmarks.quant_cases import QUANT_CASES
from benchmarks.rope_cases import ROPE_CASES
from benchmarks.serving_cases import SERVING_CASES

__all__ = ["CASES", "FAMILIES", "GIB", "SHAPE_SETS", "Case", "Target", "cases", "get_case"]


# --- input builders ----------------------------------------------------------------------------


def _gated(p, device, dtype):
    x = torch.randn(*p["rows"], 2 * p["d"], device=device, dtype=dtype)
    return (x,), dict(p.get("kwargs", {}))


def _padding(batch: int, seq_len: int, valid: list[int], device) -> torch.Tensor:
    """Right padding: row b keeps its first valid[b % len(valid)] tokens (clamped to seq_len)."""
    lengths = torch.tensor([min(valid[b % len(valid)], seq_len) for b in range(batch)], device=device)
    return torch.arange(seq_len, device=device)[None, :] < lengths[:, None]


def _encoder_mask(p, device, dtype):
    kwargs = {"sliding_window": p["window"], "device": device}
    if p.get("batch"):
        kwargs["padding_mask"] = _padding(p["batch"], p["seq_len"], p["valid"], device)
    return (p["seq_len"],), kwargs


def _seq_lens(batch: int, kv_len: int, device) -> torch.Tensor:
    """Lengths spread over the upper half of the cache (a busy decode batch), seeded."""
    generator = torch.Generator().manual_seed(1234)
    return torch.randint(kv_len // 2 + 1, kv_len + 1, (batch,), generator=generator).to(device)


def _decode_mask(p, device, dtype):
    return (_seq_lens(p["batch"], p["kv_len"], device), p["kv_len"]), {"window": p["window"]}


def _qkv(p, device, dtype, q_len):
    b, hq, hkv, s, d = p["batch"], p["q_heads"], p["kv_heads"], p["seq_len"], p["head_dim"]
    q = torch.randn(b, hq, q_len, d, device=device, dtype=dtype)
    k = torch.randn(b, hkv, s, d, device=device, dtype=dtype)
    v = torch.randn(b, hkv, s, d, device=device, dtype=dtype)
    return q, k, v


def _prefill(p, device, dtype):
    q, k, v = _qkv(p, device, dtype, p["seq_len"])
    padding = _padding(p["batch"], p["seq_len"], p["valid"], device) if p.get("valid") else None
    kwargs = {"sliding_window": p["window"], "padding_mask": padding, "scale": 1 / math.sqrt(p["head_dim"])}
    return (q, k, v), kwargs


def _decode(p, device, dtype):
    q, k, v = _qkv(p, device, dtype, 1)
    seq_lens = _seq_lens(p["batch"], p["seq_len"], device)
    return (q, k, v, seq_lens), {"sliding_window": p["window"], "scale": 1 / math.sqrt(p["head_dim"])}


SANA_SCHEDULER_CONFIG = {"use_flow_sigmas": True, "prediction_type": "flow_prediction"}


def _scheduler(p, device, dtype):
    sample = torch.randn(*p["latent"], device=device, dtype=dtype)
    model_output = torch.randn(*p["latent"], device=device, dtype=dtype)
    config = {**SANA_SCHEDULER_CONFIG, "flow_shift": p["flow_shift"]}
    return (sample, model_output), {"config": config, "steps": p["steps"], "device": device}


def _scheduler_loop(make_scheduler, args, kwargs):
    """The timed unit: construct, set_timesteps(n), then n step() calls (a whole sampling loop)."""
    sample, model_output = args
    config, steps, device = kwargs["config"], kwargs["steps"], kwargs["device"]

    def run():
        scheduler = make_scheduler(**config)
        scheduler.set_timesteps(steps, device=device)
        x = sample
        for t in scheduler.timesteps:
            x = scheduler.step(model_output, t, x, return_dict=False)[0]
        return x

    return run


# --- the cases ---------------------------------------------------------------------------------

_STEP_PREFILL = {"batch": 1, "q_heads": 32, "kv_heads": 8, "head_dim": 128, "window": 512}
_QUICK_ATTN = {"batch": 1, "q_heads": 4, "kv_heads": 2, "seq_len": 32, "head_dim": 16, "window": 8}

CASES: tuple[Case, ...] = (
    (
        Case(
            "gelu_and_mul/sana-gemma2-mlp",
            "gelu_and_mul",
            "activations",
            "SANA text encoder Gemma2-2B MLP: S=300, CFG batch 2, intermediate 9216, tanh GELU",
            {"rows": [2, 300], "d": 9216, "kwargs": {"approximate": "tanh"}},
            _gated,
            quick_params={"rows": [2, 8], "d": 64, "kwargs": {"approximate": "tanh"}},
        ),
        Case(
            "gelu_and_mul/sana-1.6b-dit-width",
            "gelu_and_mul",
            "activations",
            "SANA 1.6B DiT gated width 5600 (=2.5*2240), 1024 tokens (1024 px), batch 2, erf GELU",
            {"rows": [2, 1024], "d": 5600, "kwargs": {"approximate": "none"}},
            _gated,
            quick_params={"rows": [2, 16], "d": 56, "kwargs": {"approximate": "none"}},
        ),
        Case(
            "silu_and_mul/sana-1.6b-glumbconv",
            "silu_and_mul",
            "activations",
            "SANA 1.6B GLUMBConv SiLU gate: width 5600, 1024 tokens, batch 2",
            {"rows": [2, 1024], "d": 5600},
            _gated,
            quick_params={"rows": [2, 16], "d": 56},
        ),
        Case(
            "silu_and_mul/step-dense-prefill",
            "silu_and_mul",
            "activations",
            "Step-3.5 dense MLP (intermediate 11264), prefill chunk of 4096 tokens",
            {"rows": [4096], "d": 11264},
            _gated,
            quick_params={"rows": [32], "d": 88},
        ),
        Case(
            "swiglu_step_and_mul/step-moe-decode",
            "swiglu_step_and_mul",
            "activations",
            "Step-3.5 MoE clamped SwiGLU at decode: 64 tokens x 8 experts, expert intermediate 1280, limit 7",
            {"rows": [512], "d": 1280, "kwargs": {"limit": 7.0}},
            _gated,
            quick_params={"rows": [16], "d": 40, "kwargs": {"limit": 7.0}},
        ),
        Case(
            "swiglu_step_and_mul/step-moe-prefill",
            "swiglu_step_and_mul",
            "activations",
            "Step-3.5 MoE clamped SwiGLU at prefill: 4096 tokens x 8 experts, intermediate 1280, limit 7",
            {"rows": [32768], "d": 1280, "kwargs": {"limit": 7.0}},
            _gated,
            quick_params={"rows": [64], "d": 40, "kwargs": {"limit": 7.0}},
        ),
        Case(
            "encoder_attention_mask/sana-encoder",
            "encoder_attention_mask",
            "masks",
            "SANA Gemma2 encoder mask: S=300, W=4096, CFG batch 2 right-padded (120 and 300 tokens)",
            {"seq_len": 300, "window": 4096, "batch": 2, "valid": [120, 300]},
            _encoder_mask,
            peer="transformers",
            quick_params={"seq_len": 16, "window": 4096, "batch": 2, "valid": [7, 16]},
        ),
        Case(
            "encoder_attention_mask/target-b8-s4096",
            "encoder_attention_mask",
            "masks",
            "Oracle target: B=8, S=4096, W=4096 (SANA's), right padding",
            {"seq_len": 4096, "window": 4096, "batch": 8, "valid": [1000, 4096, 2500, 3000]},
            _encoder_mask,
            peer="transformers",
            target=Target(seconds=2.0),
            quick_params={"seq_len": 64, "window": 64, "batch": 2, "valid": [20, 64]},
        ),
        Case(
            "encoder_attention_mask/step-prefill-8192",
            "encoder_attention_mask",
            "masks",
            "Step-3.5 prefill SWA mask: S=8192, W=512, no padding",
            {"seq_len": 8192, "window": 512},
            _encoder_mask,
            peer="transformers",
            quick_params={"seq_len": 64, "window": 8},
        ),
        Case(
            "swa_decode_mask/step-decode-b64-32k",
            "swa_decode_mask",
            "masks",
            "Step-3.5 decode SWA mask: batch 64 over a 32k cache, W=512",
            {"batch": 64, "kv_len": 32768, "window": 512},
            _decode_mask,
            quick_params={"batch": 4, "kv_len": 128, "window": 8},
        ),
        Case(
            "swa_decode_mask/target-b256-128k",
            "swa_decode_mask",
            "masks",
            "Oracle target: B=256, kv_len=131072, W=512",
            {"batch": 256, "kv_len": 131072, "window": 512},
            _decode_mask,
            target=Target(seconds=1.0),
            quick_params={"batch": 8, "kv_len": 256, "window": 8},
        ),
        Case(
            "prefill_attention/sana-gemma2-encoder",
            "prefill_attention",
            "attention",
            "SANA Gemma2-2B encoder attention: B=2, Hq=8, Hkv=4, D=256, S=300, W=4096, right padding",
            {
                "batch": 2,
                "q_heads": 8,
                "kv_heads": 4,
                "head_dim": 256,
                "seq_len": 300,
                "window": 4096,
                "valid": [120, 300],
            },
            _prefill,
            peer="sdpa-float-mask",
            quick_params={**_QUICK_ATTN, "batch": 2, "window": 4096, "valid": [9, 32]},
        ),
        Case(
            "prefill_attention/target-step-s4096",
            "prefill_attention",
            "attention",
            "Oracle target = Step-3.5 prefill: B=1, Hq=32, Hkv=8, D=128, S=4096, W=512",
            {**_STEP_PREFILL, "seq_len": 4096},
            _prefill,
            peer="sdpa-float-mask",
            target=Target(seconds=60.0, peak_bytes=2 * GIB),
            quick_params=_QUICK_ATTN,
        ),
        Case(
            "prefill_attention/step-s8192",
            "prefill_attention",
            "attention",
            "Step-3.5 prefill at the longest chunk: B=1, Hq=32, Hkv=8, D=128, S=8192, W=512",
            {**_STEP_PREFILL, "seq_len": 8192},
            _prefill,
            peer="sdpa-float-mask",
            quick_params={**_QUICK_ATTN, "seq_len": 64},
        ),
        Case(
            "decode_attention/step-decode-b64-32k",
            "decode_attention",
            "attention",
            "Step-3.5 decode: B=64 over a 32k cache, W=512, one TP-8 shard (Hq=8, Hkv=1, D=128)",
            {"batch": 64, "q_heads": 8, "kv_heads": 1, "head_dim": 128, "seq_len": 32768, "window": 512},
            _decode,
            peer="sdpa-float-mask",
            quick_params={**_QUICK_ATTN, "batch": 4, "seq_len": 128},
        ),
        Case(
            "dpm_scheduler/sana-1024px",
            "dpm_scheduler",
            "scheduler",
            "SANA DPM-Solver++ (flow, shift 3.0): a 20-step loop on latent [2, 32, 32, 32] (1024 px)",
            {"latent": [2, 32, 32, 32], "steps": 20, "flow_shift": 3.0},
            _scheduler,
            make_call=_scheduler_loop,
            oracle_attr="DPMSolverMultistep",
            peer="diffusers",
            quick_params={"latent": [1, 4, 8, 8], "steps": 5, "flow_shift": 3.0},
        ),
        Case(
            "dpm_scheduler/sana-4096px",
            "dpm_scheduler",
            "scheduler",
            "SANA DPM-Solver++ (flow, shift 6.0): a 20-step loop on latent [2, 32, 128, 128] (4096 px)",
            {"latent": [2, 32, 128, 128], "steps": 20, "flow_shift": 6.0},
            _scheduler,
            make_call=_scheduler_loop,
            oracle_attr="DPMSolverMultistep",
            peer="diffusers",
            quick_params={"latent": [1, 4, 16, 16], "steps": 5, "flow_shift": 6.0},
        ),
    )
    + NORM_CASES
    + SERVING_CASES
    + MOE_CASES
    + ROPE_CASES
    + KV_CACHE_CASES
    + POOL_READ_CASES
    + QUANT_CASES
)


def cases(shape_set: str = "full") -> list[Case]:
    """Every case with ``params`` set to the given shape set ("full" or "quick")."""
    if shape_set not in SHAPE_SETS:
        raise ValueError(f"shape_set must be one of {SHAPE_SETS}, got {shape_set!r}")
    if shape_set == "full":
        return list(CASES)
    return [
        Case(**{**c.__dict__, "params": c.quick_params, "shape_set": "quick", "target": c.target})
        for c in CASES
    ]


def get_case(case_id: str, shape_set: str = "full") -> Case:
    for case in cases(shape_set):
        if case.id == case_id:
            return case
    raise ValueError(f"unknown bench case {case_id!r}; known: {[c.id for c in CASES]}")
