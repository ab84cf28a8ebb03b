"""Quant mutants of the w8a8 expert path (spec/quant.md, QUANT-MOE-W8A8) and of the config reader
(QUANT-CONFIG): listed by
``mutants/quant.py``'s BACKENDS. Each is native's op with one realistic mistake."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from backends import native_quant as nq
from backends.native import NativeBackend
from backends.npu import AscendBackend, emulator_unavailable, load_emulator
from reference.quant_config import quant_scheme
from reference.quant_moe import validate_w8a8_moe_args


def _moe(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale, *, expert=nq.w8a8_expert,
         token_scale=None, scale_of=lambda e, experts: e):  # fmt: skip
    """native's w8a8_fused_moe with its pieces replaceable: ``expert`` (one expert's rows),
    ``token_scale(x_scale, token, slot)`` (the rows' input scales), ``scale_of(e, E)`` (whose
    weight scales expert e reads)."""
    experts, _, _ = validate_w8a8_moe_args(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale)
    x_q, x_scale = nq.dynamic_int8_quant(x)
    c13, c2 = w13_scale.reshape(experts, -1), w2_scale.reshape(experts, -1)
    ids = topk_ids.long()
    slots = torch.zeros(*ids.shape, x.shape[1], dtype=torch.float32)
    for e in torch.unique(ids).tolist():
        token, slot = torch.nonzero(ids == e, as_tuple=True)
        s = x_scale[token] if token_scale is None else token_scale(x_scale, token, slot)
        c = scale_of(e, experts)
        y = expert(x_q[token], s, w13[e], w2[e], c13[c], c2[c])
        slots[token, slot] = y * topk_weights[token, slot].float()[:, None]
    return slots.sum(1).to(x.dtype)


class MoeNeighbourExpertScale(NativeBackend):
    """Expert e dequantized with expert e + 1's weight scales (w13_scale and w2_scale).

    Origin: scales indexed by a global expert id while the weights are the rank's local slice
    under expert parallelism (or the reverse): the weights load, the scales are a neighbour's.
    Caught by: QUANT-MOE-W8A8-SCALES, QUANT-MOE-W8A8.
    """

    name = "w8a8-moe-neighbour-expert-scale"
    clauses = {"QUANT-MOE-W8A8-SCALES", "QUANT-MOE-W8A8"}

    def w8a8_fused_moe(self, x, w13, w2, topk_weights, topk_ids, *, w13_scale, w2_scale):
        return _moe(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale,
                    scale_of=lambda e, experts: (e + 1) % experts)  # fmt: skip


def _per_tensor_weight_scale(x_q, x_scale, w13, w2, c13, c2):
    return nq.w8a8_expert(x_q, x_scale, w13, w2, c13[:1].expand_as(c13), c2[:1].expand_as(c2))


class MoeWeightScalePerTensor(NativeBackend):
    """Each expert's per-channel weight scales read as one per-tensor scale (channel 0's).

    Origin: a per-tensor W8A8 MoE path (static fp8 / int8 checkpoints) used for a channel-wise
    compressed-tensors checkpoint (``strategy: channel``).
    Caught by: QUANT-MOE-W8A8-SCALES, QUANT-MOE-W8A8.
    """

    name = "w8a8-moe-weight-scale-per-tensor"
    clauses = {"QUANT-MOE-W8A8-SCALES", "QUANT-MOE-W8A8"}

    def w8a8_fused_moe(self, x, w13, w2, topk_weights, topk_ids, *, w13_scale, w2_scale):
        return _moe(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale, expert=_per_tensor_weight_scale)


class MoeTokenScaleKMajor(NativeBackend):
    """The k expanded rows of a token are token-major (row t k + j) but their input scales are read
    k-major (scale of row r = that of token r mod T): most rows take another token's scale.

    Origin: npu_moe_init_routing's expanded rows are k-major while a per-token scale was repeated
    token-major (vLLM's test reference repeats a_s per token; the two orders mixed).
    Caught by: QUANT-MOE-W8A8-INPUT, QUANT-MOE-W8A8.
    """

    name = "w8a8-moe-token-scale-k-major"
    clauses = {"QUANT-MOE-W8A8-INPUT", "QUANT-MOE-W8A8"}

    def w8a8_fused_moe(self, x, w13, w2, topk_weights, topk_ids, *, w13_scale, w2_scale):
        k = topk_ids.shape[1]

        def token_scale(x_scale, token, slot):
            return x_scale[(token * k + slot) % x_scale.shape[0]]

        return _moe(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale, token_scale=token_scale)


def _quant_before_gate(x_q, x_scale, w13, w2, c13, c2):
    h = nq.integer_sum(x_q, w13.T).float() * x_scale * c13
    h_q, h_scale = nq.dynamic_int8_quant(h)  # the gate|up row quantized BEFORE the activation
    gate, up = (h_q.float() * h_scale).chunk(2, dim=-1)
    a_q, a_scale = nq.dynamic_int8_quant(F.silu(gate) * up)
    return nq.integer_sum(a_q, w2.T).float() * a_scale * c2


class MoeQuantizedBeforeGate(NativeBackend):
    """The gate|up GEMM's output quantized per row before the SwiGLU (one scale over both halves),
    then the activation of the dequantized values.

    Origin: the int8 requantization moved before the activation to feed an int8 SwiGLU; a row's
    scale then follows its larger half and rounds the other away.
    Caught by: QUANT-MOE-W8A8-REQUANT, QUANT-MOE-W8A8.
    """

    name = "w8a8-moe-quantized-before-gate"
    clauses = {"QUANT-MOE-W8A8-REQUANT", "QUANT-MOE-W8A8"}

    def w8a8_fused_moe(self, x, w13, w2, topk_weights, topk_ids, *, w13_scale, w2_scale):
        return _moe(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale, expert=_quant_before_gate)


def _requant_per_tensor(x_q, x_scale, w13, w2, c13, c2):
    h = nq.integer_sum(x_q, w13.T).float() * x_scale * c13
    gate, up = h.chunk(2, dim=-1)
    act = F.silu(gate) * up
    a_scale = act.abs().amax().clamp_min(1e-30) / 127.0  # one scale for all the expert's rows
    a_q = torch.round(act / a_scale).clamp(-127, 127)
    return (a_q.double() @ w2.double().T).float() * a_scale * c2


class MoeRequantPerTensor(NativeBackend):
    """The activation requantized with one scale per expert (all its tokens' rows) instead of one
    per row.

    Origin: a static / per-tensor activation scheme (``input_scale`` of a static checkpoint) applied
    to the dynamic per-token second quantization: small tokens lose their digits.
    Caught by: QUANT-MOE-W8A8-REQUANT, QUANT-MOE-W8A8.
    """

    name = "w8a8-moe-requant-per-tensor"
    clauses = {"QUANT-MOE-W8A8-REQUANT", "QUANT-MOE-W8A8"}

    def w8a8_fused_moe(self, x, w13, w2, topk_weights, topk_ids, *, w13_scale, w2_scale):
        return _moe(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale, expert=_requant_per_tensor)


def _activate_right(x_q, x_scale, w13, w2, c13, c2):
    h = nq.integer_sum(x_q, w13.T).float() * x_scale * c13
    gate, up = h.chunk(2, dim=-1)
    a_q, a_scale = nq.dynamic_int8_quant(F.silu(up) * gate)  # the SiLU on the right half
    return nq.integer_sum(a_q, w2.T).float() * a_scale * c2


class MoeActivateRight(NativeBackend):
    """The SiLU applied to the right (up) half of the gate|up row.

    Origin: npu_dequant_swiglu_quant's ``activate_left`` defaults to False (the right half
    activated); vllm-ascend passes True. A call that leaves the default swaps gate and up.
    Caught by: QUANT-MOE-W8A8.
    """

    name = "w8a8-moe-activate-right"
    clauses = {"QUANT-MOE-W8A8"}

    def w8a8_fused_moe(self, x, w13, w2, topk_weights, topk_ids, *, w13_scale, w2_scale):
        return _moe(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale, expert=_activate_right)


class NpuSwigluRightHalf(AscendBackend):
    """The Ascend adapter calls npu_dequant_swiglu_quant without ``activate_left=True``: the op's
    default activates the right half, so the SiLU falls on the up projection.

    Origin: the documented default (``activate_left=False``) left in place; vllm-ascend passes True.
    Caught by: QUANT-MOE-W8A8.
    """

    name = "npu-w8a8-moe-swiglu-right-half"
    clauses = {"QUANT-MOE-W8A8"}

    def __init__(self):
        super().__init__(self.name, load_emulator, emulator_unavailable)

    def dequant_swiglu_args(self) -> dict:
        return {"quant_mode": 1}


MOE_MUTANTS = [
    MoeNeighbourExpertScale(),
    MoeWeightScalePerTensor(),
    MoeTokenScaleKMajor(),
    MoeQuantizedBeforeGate(),
    MoeRequantPerTensor(),
    MoeActivateRight(),
    NpuSwigluRightHalf(),
]


class ConfigScaleFmtIgnored(NativeBackend):
    """The config reader drops ``scale_fmt``: a DeepSeek-V3.2 / V4 checkpoint's UE8M0 scales read as
    float32 ones.

    Origin: an fp8 config builder that copies ``weight_block_size`` only (a public "scale_fmt dropped
    again" regression test guards exactly this).
    Caught by: QUANT-CONFIG.
    """

    name = "quant-config-scale-fmt-ignored"
    clauses = {"QUANT-CONFIG"}

    def quant_scheme(self, config):
        scheme = quant_scheme(config)
        return {**scheme, "use_ue8m0": False} if scheme["method"] == "fp8" else scheme


class ConfigGptqV2AsV1(NativeBackend):
    """The reader ignores GPTQ's ``checkpoint_format``: a gptq_v2 checkpoint's zeros read as v1's
    (zero minus one), every dequantized weight off by one scale.

    Origin: v2 support added to the kernels but not to the config parsing (QUANT-W4A16-ZEROS).
    Caught by: QUANT-CONFIG.
    """

    name = "quant-config-gptq-v2-as-v1"
    clauses = {"QUANT-CONFIG"}

    def quant_scheme(self, config):
        scheme = quant_scheme(config)
        return {**scheme, "packing": "gptq"} if scheme.get("packing") == "gptq_v2" else scheme


CONFIG_MUTANTS = [ConfigScaleFmtIgnored(), ConfigGptqV2AsV1()]
