"""The quant family's range rules (spec/quant.md, Ranges)."""

from __future__ import annotations

from conformance.strategies.ranges import Measure, around, dim, has, odd, past


def _block_offset(argument: str):
    """The offset of ``argument``'s dim 0 or 1 from the nearest multiple of 128 (-1, 0, 1: the partial
    trailing block's edge), as a measure of the [N, K] weight or [M, K] activation."""

    def of(arguments: dict):
        t = arguments.get(argument)
        if getattr(t, "dim", lambda: 0)() != 2:
            return None
        return [((size + 1) % 128) - 1 for size in t.shape[-2:] if size >= 127] or None

    return of


INT8_K = Measure("dynamic_int8_quant", "hidden size", dim("x", -1))
MM_K = Measure("int8_scaled_mm", "K", dim("a", -1))
RULES = [
    past(INT8_K, 256, "vLLM's int8 quant kernels: one block of up to 256 threads a row"),
    odd(INT8_K),
    has(INT8_K, 7168, why="DeepSeek-V3's hidden size"),
    past(MM_K, 256, "K past one block of 256"),
    odd(MM_K),
    has(MM_K, 7168, why="DeepSeek-V3's hidden size"),
    past(Measure("int8_scaled_mm", "tokens", dim("a", 0)), 128, "M past a 128-token tile"),
    past(Measure("fp8_block_scaled_mm", "tokens", dim("a", 0)), 128, "M past a 128-token tile"),
    around(
        Measure("fp8_block_scaled_mm", "N and K at a 128 block's edge", _block_offset("b")),
        "the partial trailing 128 block: 128 t - 1, 128 t, 128 t + 1",
    ),  # fmt: skip
    has(
        Measure("fp8_group_quant", "group size", lambda arguments: arguments.get("group_size")),
        32,
        64,
        128,
        why="the group sizes of the field's per-token-group quantization",
    ),  # fmt: skip
    past(Measure("fp8_group_quant", "tokens", dim("x", 0)), 128, "M past a 128-token tile"),
    has(
        Measure("w4a16_mm", "group size", lambda arguments: arguments.get("group_size")),
        32,
        64,
        128,
        why="AWQ / GPTQ group sizes (a zero-point stride per group size: sglang#37759)",
    ),  # fmt: skip
    past(Measure("w4a16_mm", "tokens", dim("x", 0)), 128, "M past a 128-token tile"),
]
