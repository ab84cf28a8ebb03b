"""The KV-cache family's range rules (spec/kv_cache.md, Ranges)."""

from __future__ import annotations

from conformance.strategies.ranges import Measure, around, dim, has, odd, past


def _block_size(arguments: dict) -> int | None:
    """The page size: dim 1 of the [num_blocks, block_size, H, D] cache (an HND cache is passed as
    that shape's transposed view, KV-LAYOUT)."""
    cache = arguments.get("k_cache")
    return int(cache.shape[1]) if getattr(cache, "dim", lambda: 0)() == 4 else None


def _page_edges(arguments: dict):
    """Which of a page's last, first and second slots (-1, 0, 1) the valid slots hit (pages >= 3)."""
    bs, slots = _block_size(arguments), arguments.get("slot_mapping")
    if bs is None or bs < 3 or slots is None:
        return None
    offsets = {int(s) % bs for s in slots.tolist() if s >= 0}
    return [edge for edge, o in ((-1, bs - 1), (0, 0), (1, 1)) if o in offsets]


def _largest_slot(arguments: dict):
    slots = arguments.get("slot_mapping")
    return int(slots.max()) if slots is not None and slots.numel() else None


PAGE = Measure("write_kv_cache", "page size", _block_size)
KEY_DIM = Measure("write_kv_cache", "key head_dim", dim("key", -1))
RULES = [
    past(PAGE, 128, "page sizes to 128 (vllm-ascend's), 256 past them"),
    odd(PAGE),
    odd(Measure("write_kv_cache", "kv heads", dim("key", 1))),
    has(KEY_DIM, 96, 192, 576, why="head dim 96, MLA's qk 192 and latent 576"),
    past(Measure("write_kv_cache", "largest slot", _largest_slot), 2048, "pools past 2048 slots"),
    around(
        Measure("write_kv_cache", "slots at a page's edge", _page_edges),
        "a page boundary: its last slot, the next page's first and second",
    ),  # fmt: skip
]
