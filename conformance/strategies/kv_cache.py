"""Hypothesis strategies for the KV-cache write properties (spec/kv_cache.md).

A ``WriteRecipe`` fixes one write_kv_cache call: the tokens' keys and values (from ``seed``), the
slot of each token (distinct slots of a permuted pool, padded tokens with negative slots anywhere
in the batch), the caches' page size and layout, and what every slot holds before the call
(random bits, NaN and a sentinel in the cache's last slot: KV-PAD, KV-KEEP). ``make`` builds the
BUFFERS the caches live in (a combined k/v buffer is one) and ``caches(buffers)`` the views the op
receives, so the oracle and a backend each get their own copy of the same memory and the buffers
are compared bit for bit afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from conformance.strategies.common import dims_fit, pinned_values, seeds, strided_view
from reference.kv_cache import FP8_DTYPES, FP8_MAX

PAGE_SIZES = (1, 16, 32, 64, 128, 256)
SMALL_PAGES = (1, 2, 3, 16)  # the properties that are not about the page size: small pools
KEY_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# (Dk, Dv): equal, and MLA-like 192/128 with small look-alikes (KV-HEAD-DIMS).
SAME_DIMS = ((4, 4), (8, 8), (16, 16), (96, 96))  # spec/kv_cache.md, Ranges: Phi-3's 96
MIXED_DIMS = ((192, 128), (12, 8), (8, 12), (16, 4))
# KV-KEY-ONLY: DeepSeek's latent 576 = 512 + 64, and small caches with the same 8:1 split.
LATENT_DIMS = (576, 72, 18, 9)
# KV-LAYOUT: separate NHD caches, HND caches passed as transpose(1, 2) views, the halves of one
# [num_blocks, 2, bs, H, D] buffer, or the column ranges of one [num_blocks, bs, H, Dk + Dv] buffer.
CACHE_LAYOUTS = ("nhd", "hnd", "kv-fused", "columns")
# key and value fresh, or the key and value columns of one fused qkv projection [T, Hq D + H (Dk + Dv)].
KEY_LAYOUTS = ("separate", "fused-qkv")
SENTINEL = 1234.5  # the cache's last slot, where a -1 read as Python's last index would write


@dataclass(frozen=True)
class WriteRecipe:
    tokens: int
    heads: int
    key_dim: int
    value_dim: int | None  # None: a key-only cache (KV-KEY-ONLY)
    block_size: int
    num_blocks: int
    dtype: torch.dtype
    seed: int
    padded: tuple[int, ...] = ()  # the tokens whose slot is negative
    pad_value: int = -1
    slot_dtype: torch.dtype = torch.int64
    cache_layout: str = "nhd"
    key_layout: str = "separate"
    cache_dtype: torch.dtype | None = None  # None: key's dtype; else an fp8 dtype (KV-FP8)
    scale_shape: tuple[int, ...] = ()  # [], [1] or [H] (fp8 only)
    magnitude: float = 1.0  # |key / scale| reaches about this many times the fp8 maximum
    metadata_layout: str = "contiguous"  # "views": slot_mapping and a per-head scale as strided views
    graph_padding: int = 0  # rows of key and value past slot_mapping's length (KV-PAD)

    @property
    def stored_dtype(self) -> torch.dtype:
        return self.cache_dtype or self.dtype

    @property
    def slots(self) -> int:
        return self.num_blocks * self.block_size

    def slot_mapping(self, device="cpu") -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed + 1)
        slots = torch.randperm(self.slots, generator=gen)[: self.tokens]
        if self.padded:
            slots[list(self.padded)] = self.pad_value
        slots = slots.to(self.slot_dtype).to(device)
        return strided_view(slots) if self.metadata_layout == "views" else slots

    def tensors(self, device):
        """(key, value or None) on ``device``, as fresh tensors or views of a fused qkv projection."""
        gen = torch.Generator().manual_seed(self.seed)
        rows = self.tokens + self.graph_padding
        key = torch.randn(rows, self.heads, self.key_dim, generator=gen, dtype=torch.float64)
        value = None
        if self.value_dim is not None:
            value = torch.randn(rows, self.heads, self.value_dim, generator=gen, dtype=torch.float64)
        scales = self.scales("cpu")
        if scales is not None:  # |x / scale| about magnitude * M at 3 sigma (saturation beyond M)
            unit = FP8_MAX[self.cache_dtype] / 3 * self.magnitude
            key, value = (
                None if t is None else t * s.expand(self.heads).double()[:, None] * unit
                for t, s in zip((key, value), scales, strict=True)
            )
        key, value = (None if t is None else t.to(self.dtype).to(device) for t in (key, value))
        if self.key_layout != "fused-qkv":
            return key, value
        parts = [torch.randn(rows, 2 * self.heads * self.key_dim, generator=gen).to(self.dtype)]
        parts += [t.flatten(1).cpu() for t in (key, value) if t is not None]
        qkv = torch.cat(parts, dim=1).to(device)
        start = 2 * self.heads * self.key_dim
        key_view = qkv[:, start : start + key.shape[1] * key.shape[2]].unflatten(1, key.shape[1:])
        if value is None:
            return key_view, None
        start += key.shape[1] * key.shape[2]
        return key_view, qkv[:, start:].unflatten(1, value.shape[1:])

    def scales(self, device):
        """(k_scale, v_scale) float32 for fp8 caches, None otherwise."""
        if self.cache_dtype is None:
            return None
        gen = torch.Generator().manual_seed(self.seed + 2)
        k, v = (torch.rand(self.scale_shape, generator=gen) * 0.9 + 0.1 for _ in range(2))
        k, v = k.to(device), v.to(device)
        if self.metadata_layout == "views" and k.dim() == 1:
            k, v = strided_view(k), strided_view(v)
        return k, (None if self.value_dim is None else v)

    def buffers(self, device) -> tuple[torch.Tensor, ...]:
        """The memory the caches live in, before the call: random bits, NaN, the sentinel last."""
        gen = torch.Generator().manual_seed(self.seed + 3)
        nb, bs, h = self.num_blocks, self.block_size, self.heads
        dims = [self.key_dim] + ([] if self.value_dim is None else [self.value_dim])
        if self.cache_layout == "kv-fused" and len(dims) == 2 and dims[0] == dims[1]:
            shapes = [(nb, 2, bs, h, dims[0])]
        elif self.cache_layout == "columns" and len(dims) == 2:
            shapes = [(nb, bs, h, sum(dims))]
        elif self.cache_layout == "hnd":
            shapes = [(nb, h, bs, d) for d in dims]
        else:
            shapes = [(nb, bs, h, d) for d in dims]
        out = []
        for shape in shapes:
            fill = torch.randn(shape, generator=gen, dtype=torch.float64) * 4
            fill[torch.rand(shape, generator=gen) < 0.1] = float("nan")
            out.append(fill.to(self.stored_dtype).to(device))
        for cache in self.caches(tuple(out)):
            if cache is not None:
                cache[-1, -1] = SENTINEL
        return tuple(out)

    def caches(self, buffers):
        """(k_cache, v_cache or None): the [num_blocks, bs, H, D] views of ``buffers``."""
        if len(buffers) == 1 and self.value_dim is not None:
            (buffer,) = buffers
            if buffer.dim() == 5:
                return buffer[:, 0], buffer[:, 1]
            return buffer[..., : self.key_dim], buffer[..., self.key_dim :]
        views = [b.transpose(1, 2) if self.cache_layout == "hnd" else b for b in buffers]
        return views[0], (views[1] if len(views) > 1 else None)


@st.composite
def write_recipes(
    draw, *, pages=SMALL_PAGES, dims=SAME_DIMS, dtypes=KEY_DTYPES, cache_layouts=CACHE_LAYOUTS,
    key_layouts=KEY_LAYOUTS, padding=(False, True), key_only=False, fp8=False, magnitudes=(0.9,),
    heads=(1, 2, 3), metadata_layouts=("contiguous",), graph_padding=(0,),
) -> WriteRecipe:  # fmt: skip
    """One write: 1-24 tokens into a pool with room to spare, padding anywhere when drawn; the metadata
    contiguous unless ``metadata_layouts`` says "views" (KV-METADATA-VIEWS)."""
    block_size = draw(st.sampled_from(pages), label="block_size")
    tokens = draw(st.integers(1, 24), label="tokens")
    num_blocks = -(-tokens // block_size) + draw(st.integers(0, 3), label="spare_blocks")
    pad = draw(st.sampled_from(padding), label="padding")
    padded = ()
    if pad:
        padded = tuple(sorted(draw(st.sets(st.integers(0, tokens - 1), min_size=1, max_size=tokens))))
    h = 1 if key_only and draw(st.booleans()) else draw(st.sampled_from(heads))
    if key_only:
        key_dim, value_dim = draw(st.sampled_from(LATENT_DIMS)), None
    else:
        key_dim, value_dim = draw(st.sampled_from(dims))
        # MODEL-RUN: one of the model's (kv heads, Dk, Dv) of a kind the property draws.
        kinds = [k for k in pinned_values("kv.layer") or () if dims_fit(k[1], k[2], dims)]
        if kinds:
            h, key_dim, value_dim = draw(st.sampled_from(kinds))
    cache_dtype = draw(st.sampled_from(FP8_DTYPES)) if fp8 else None
    return WriteRecipe(
        tokens=tokens,
        heads=h,
        key_dim=key_dim,
        value_dim=value_dim,
        block_size=block_size,
        num_blocks=num_blocks,
        dtype=draw(st.sampled_from(dtypes)),
        seed=draw(seeds()),
        padded=padded,
        pad_value=draw(st.sampled_from((-1, -1, -1, -7))),
        slot_dtype=draw(st.sampled_from((torch.int64, torch.int32))),
        cache_layout=draw(st.sampled_from(cache_layouts)),
        key_layout=draw(st.sampled_from(key_layouts)),
        cache_dtype=cache_dtype,
        scale_shape=draw(st.sampled_from(((), (1,), (h,)))) if fp8 else (),
        magnitude=draw(st.sampled_from(magnitudes)),
        metadata_layout=draw(st.sampled_from(metadata_layouts)),  # drawn last: earlier draws unchanged
        graph_padding=draw(st.sampled_from(graph_padding)),
    )
