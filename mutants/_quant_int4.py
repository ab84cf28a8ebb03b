"""Quant mutants of the weight-only int4 GEMM (spec/quant.md): listed by ``mutants/quant.py``'s BACKENDS."""

from __future__ import annotations

import torch

from backends import native_quant as nq
from backends.native import NativeBackend
from backends.npu import AscendBackend, emulator_unavailable, load_emulator
from reference.quant_w4a16 import validate_w4a16_args


def _dequant_mm(x, q, zeros, scales, g_rows, g_zeros=None):
    """x @ ((q - zeros[k // g_zeros]) * scales[k // g_rows]) in the native order (scales' dtype)."""
    k = q.shape[0]
    z = zeros.repeat_interleave(g_zeros or g_rows, dim=0)[:k]
    w = (q - z).to(scales.dtype) * scales.repeat_interleave(g_rows, dim=0)[:k]
    return x @ w.to(x.dtype)


def _unpacked(qweight, qzeros, n, packing, *, awq_sequential=False, zero_offset=None):
    if packing == "awq" and not awq_sequential:
        return nq.awq_columns(qweight), nq.awq_columns(qzeros)
    if packing == "awq":  # the words read in order: the interleave ignored
        return nq.nibbles(qweight).flatten(-2), nq.nibbles(qzeros).flatten(-2)
    offset = (1 if packing == "gptq" else 0) if zero_offset is None else zero_offset
    q = nq.nibbles(qweight).transpose(-1, -2).reshape(-1, n)
    return q, nq.nibbles(qzeros).flatten(-2) + offset


class AwqReadInOrder(NativeBackend):
    """AWQ words unpacked in nibble order, not AutoAWQ's interleave (0, 2, 4, 6, 1, 3, 5, 7).

    Origin: a GPTQ-style unpacking reused for AWQ checkpoints (the reverse_awq_order step skipped).
    Caught by: QUANT-W4A16-PACKING, QUANT-W4A16-MM.
    """

    name = "awq-read-in-order"
    clauses = {"QUANT-W4A16-PACKING", "QUANT-W4A16-MM"}

    def w4a16_mm(self, x, qweight, scales, qzeros, *, group_size, packing):
        _, n, g = validate_w4a16_args(x, qweight, scales, qzeros, group_size, packing)
        q, zeros = _unpacked(qweight, qzeros, n, packing, awq_sequential=True)
        return _dequant_mm(x, q, zeros, scales, g)


class GptqV1ZeroNotIncremented(NativeBackend):
    """A GPTQ v1 checkpoint's stored zeros used as they are (the +1 of the v1 format missed).

    Origin: ``use_v2_format`` hard-coded (a v2-only kernel fed v1 checkpoints); the zero-point off-by-one.
    Caught by: QUANT-W4A16-ZEROS, QUANT-W4A16-MM.
    """

    name = "gptq-v1-zero-not-incremented"
    clauses = {"QUANT-W4A16-ZEROS", "QUANT-W4A16-MM"}

    def w4a16_mm(self, x, qweight, scales, qzeros, *, group_size, packing):
        _, n, g = validate_w4a16_args(x, qweight, scales, qzeros, group_size, packing)
        q, zeros = _unpacked(qweight, qzeros, n, packing, zero_offset=0)
        return _dequant_mm(x, q, zeros, scales, g)


class GptqV2ZeroIncremented(NativeBackend):
    """The v1 +1 applied to gptq_v2 checkpoints too, whose stored zeros are the zeros.

    Origin: a kernel that always adds one (vLLM's ``apply_weights`` hard-coding the v1 format).
    Caught by: QUANT-W4A16-ZEROS, QUANT-W4A16-MM.
    """

    name = "gptq-v2-zero-incremented"
    clauses = {"QUANT-W4A16-ZEROS", "QUANT-W4A16-MM"}

    def w4a16_mm(self, x, qweight, scales, qzeros, *, group_size, packing):
        _, n, g = validate_w4a16_args(x, qweight, scales, qzeros, group_size, packing)
        q, zeros = _unpacked(qweight, qzeros, n, packing, zero_offset=None if packing == "awq" else 1)
        return _dequant_mm(x, q, zeros, scales, g)


class ZeroStrideGroup32(NativeBackend):
    """With group size 32 the zero points are read with group 64's stride (one stride for all sizes).

    Origin: sglang#37759 (the Marlin MoE path loaded one zero-point stride for group_size 32).
    Caught by: QUANT-W4A16-GROUPS, QUANT-W4A16-MM.
    """

    name = "zero-stride-group-32"
    clauses = {"QUANT-W4A16-GROUPS", "QUANT-W4A16-MM"}

    def w4a16_mm(self, x, qweight, scales, qzeros, *, group_size, packing):
        _, n, g = validate_w4a16_args(x, qweight, scales, qzeros, group_size, packing)
        q, zeros = _unpacked(qweight, qzeros, n, packing)
        return _dequant_mm(x, q, zeros, scales, g, g_zeros=64 if g == 32 else g)


class GroupSizeFixed128(NativeBackend):
    """Scales and zeros expanded with group size 128 whatever the checkpoint's (the config default).

    Origin: a kernel or loader that reads the group size from a default instead of quantization_config.
    Caught by: QUANT-W4A16-GROUPS, QUANT-W4A16-MM.
    """

    name = "group-size-fixed-128"
    clauses = {"QUANT-W4A16-GROUPS", "QUANT-W4A16-MM"}

    def w4a16_mm(self, x, qweight, scales, qzeros, *, group_size, packing):
        _, n, _ = validate_w4a16_args(x, qweight, scales, qzeros, group_size, packing)
        q, zeros = _unpacked(qweight, qzeros, n, packing)
        return _dequant_mm(x, q, zeros, scales, 128)


class Int4SignedNibbles(NativeBackend):
    """Nibbles read as signed int4 (-8..7) before the zero is subtracted.

    Origin: a symmetric-int4 (uint4b8 / int4) unpacking used for an asymmetric checkpoint.
    Caught by: QUANT-W4A16-MM.
    """

    name = "int4-signed-nibbles"
    clauses = {"QUANT-W4A16-MM"}

    def w4a16_mm(self, x, qweight, scales, qzeros, *, group_size, packing):
        _, n, g = validate_w4a16_args(x, qweight, scales, qzeros, group_size, packing)
        q, zeros = _unpacked(qweight, qzeros, n, packing)
        return _dequant_mm(x, torch.where(q >= 8, q - 16, q), zeros, scales, g)


class NpuGptqOffsetAsZero(AscendBackend):
    """The Ascend adapter passes a GPTQ checkpoint's zero (less 8) as npu_weight_quant_batchmatmul's
    antiquant_offset, which the op adds: (q - 8) + (zero - 8) instead of q - zero.

    Origin: the offset read as a zero point (CANN-WEIGHT-QUANT-BMM: ``(weight + antiquant_offset) *
    antiquant_scale``); right only for symmetric zeros (8), as a GPTQ method in the public code index
    unpacks the zeros with ``- 8`` and passes them as they are, where the AWQ method negates them.
    Caught by: QUANT-W4A16-ZEROS, QUANT-W4A16-MM.
    """

    name = "npu-gptq-offset-as-zero"
    clauses = {"QUANT-W4A16-ZEROS", "QUANT-W4A16-MM"}

    def __init__(self):
        super().__init__(self.name, load_emulator, emulator_unavailable)

    def int4_antiquant_offset(self, zeros, packing):
        return 8 - zeros if packing == "awq" else zeros - 8


INT4_MUTANTS = [
    AwqReadInOrder(),
    GptqV1ZeroNotIncremented(),
    GptqV2ZeroIncremented(),
    ZeroStrideGroup32(),
    GroupSizeFixed128(),
    Int4SignedNibbles(),
    NpuGptqOffsetAsZero(),
]
