"""The norms family's range rules (spec/norms.md, Ranges)."""

from __future__ import annotations

from conformance.strategies.ranges import Measure, dim, has, odd, past

OPS = ("rms_norm", "gemma_rms_norm", "fused_add_rms_norm", "gemma_fused_add_rms_norm")
HIDDEN = {op: Measure(op, "hidden size", dim("x", -1)) for op in OPS}
RULES = [
    *(past(HIDDEN[op], 1024, "vLLM's RMSNorm kernels: one block of up to 1024 threads a row") for op in OPS),
    *(odd(HIDDEN[op]) for op in OPS),
    has(HIDDEN["rms_norm"], 2880, 7168, why="gpt-oss's and DeepSeek-V3's hidden sizes"),
]
