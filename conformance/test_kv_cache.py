"""Conformance properties for spec/kv_cache.md: the paged cache's write, fp8 caches, the round trip.

The write is compared bit for bit: the oracle and the backend each write into their own copy of
the same buffers (random bits, NaN, a sentinel in the last slot), and the whole buffers must be
equal afterwards (KV-KEEP: nothing else changes). The read of fp8 caches and the round trip are
compared by ATTN-TOL (spec/attention.md), as every serving output.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from backends import not_implemented_reason
from conformance import signatures
from conformance.bad_input import check_backend_raises, params
from conformance.bad_input.kv_cache import ERRORS
from conformance.checks import check, describe
from conformance.harness import profiles
from conformance.strategies import kv_cache as strategies
from conformance.strategies.common import strided_view
from conformance.strategies.kv_cache import MIXED_DIMS, PAGE_SIZES, write_recipes
from conformance.strategies.serving import serving_recipes, windows
from conformance.test_serving import compare, options, oracle
from reference import kv_cache, serving

F32 = (torch.float32,)
FP8 = kv_cache.FP8_DTYPES
# The read properties run a serving call per example on every paged backend: a quarter of the profile's
# examples (the fp8 dtype, scale shape and page size are the draws that matter; profiles.share_of_examples).
READ_EXAMPLES = profiles.share_of_examples(1 / 4)
# The refining write clauses draw one narrow aspect each (KV-WRITE draws them all): half the examples.
NARROW_EXAMPLES = profiles.share_of_examples(1 / 2)
FP8_READ_EXAMPLES = profiles.share_of_examples(1 / 6)  # also on flex, whose eager calls cost 0.4 s


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().view(torch.uint8)


def _first_difference(got: torch.Tensor, want: torch.Tensor) -> str:
    """Where two buffers of one shape first differ, by element (the bytes compared)."""
    got_bits, want_bits = _bits(got), _bits(want)
    per_element = got_bits.reshape(*got.shape, -1).ne(want_bits.reshape(*want.shape, -1)).any(-1)
    where = per_element.nonzero()
    index = tuple(where[0].tolist())
    got_value, want_value = got.detach().cpu()[index].float().item(), want[index].float().item()
    return f"{len(where)} elements differ; first at {index}: got {got_value!r}, expected {want_value!r}"


def _call(impl, recipe, device, buffers) -> None:
    key, value = recipe.tensors(device)
    k_cache, v_cache = recipe.caches(buffers)
    k_scale, v_scale = recipe.scales(device) or (None, None)
    impl.write_kv_cache(key, value, k_cache, v_cache, recipe.slot_mapping(device), k_scale=k_scale,
                        v_scale=v_scale)  # fmt: skip


def check_write(backend, device, recipe, *, clause: str) -> None:
    """The backend's write against the oracle's, on copies of the same buffers, bit for bit."""
    buffers = recipe.buffers(device)
    expected = tuple(b.detach().cpu().clone() for b in buffers)
    _call(kv_cache, recipe, "cpu", expected)
    _call(backend, recipe, device, buffers)
    context = describe(
        backend, device, "write_kv_cache", recipe=recipe, slot_mapping=recipe.slot_mapping().tolist()
    )
    for i, (got, want) in enumerate(zip(buffers, expected, strict=True)):
        same = torch.equal(_bits(got), _bits(want))
        check(same, clause=clause, message=f"{context}: buffer {i} {tuple(want.shape)}: "
              f"{'' if same else _first_difference(got, want)}")  # fmt: skip


@pytest.mark.clause("KV-WRITE")
@pytest.mark.op("write_kv_cache")
@given(recipe=write_recipes(pages=PAGE_SIZES))
def test_write_matches_oracle(backend, device, recipe):
    """Each token's key and value land at (s // bs, s % bs), bit for bit, in every layout and page size."""
    check_write(backend, device, recipe, clause="KV-WRITE")


@pytest.mark.clause("KV-PAD")
@pytest.mark.op("write_kv_cache")
@given(recipe=write_recipes(padding=(True,), graph_padding=(0, 3)))
def test_padded_tokens_are_skipped(backend, device, recipe):
    """Tokens with a negative slot, anywhere in the batch, and key/value rows past slot_mapping's length
    write nothing (the last slot keeps its value)."""
    check_write(backend, device, recipe, clause="KV-PAD")


@pytest.mark.clause("KV-KEEP")
@pytest.mark.op("write_kv_cache")
@NARROW_EXAMPLES
@given(recipe=write_recipes(cache_layouts=("kv-fused", "columns", "nhd")))
def test_other_slots_keep_their_bits(backend, device, recipe):
    """Every slot not written, and the other half of a combined buffer, keeps its bits (NaN included)."""
    check_write(backend, device, recipe, clause="KV-KEEP")


@pytest.mark.clause("KV-PAGE-SIZE")
@pytest.mark.op("write_kv_cache")
@NARROW_EXAMPLES
@given(recipe=write_recipes(pages=PAGE_SIZES, cache_layouts=("nhd",), key_layouts=("separate",)))
def test_every_page_size(backend, device, recipe):
    """Page sizes 1, 16, 32, 64, 128, 256 over a permuted pool."""
    check_write(backend, device, recipe, clause="KV-PAGE-SIZE")


@pytest.mark.clause("KV-LAYOUT")
@pytest.mark.op("write_kv_cache")
@NARROW_EXAMPLES
@given(
    recipe=write_recipes(cache_layouts=("hnd", "kv-fused", "columns"), dims=strategies.SAME_DIMS + MIXED_DIMS)
)
def test_strided_caches_and_inputs(backend, device, recipe):
    """HND caches as transpose views, halves of combined buffers, key/value as qkv-projection views."""
    check_write(backend, device, recipe, clause="KV-LAYOUT")


@pytest.mark.clause("KV-METADATA-VIEWS")
@pytest.mark.op("write_kv_cache")
@profiles.should_examples(1 / 2)
@given(recipe=write_recipes(pages=PAGE_SIZES, metadata_layouts=("views",)))
def test_should_read_metadata_views(backend, device, recipe):
    """slot_mapping (and a per-head fp8 scale) as every other element of a buffer: the same write."""
    if recipe.seed % 2:  # half the examples quantize, so a per-head scale view is drawn too
        fp8 = FP8[recipe.seed % 4 // 2]
        recipe = dataclasses.replace(recipe, cache_dtype=fp8, scale_shape=(recipe.heads,), cache_layout="nhd")
    check_write(backend, device, recipe, clause="KV-METADATA-VIEWS")


@pytest.mark.clause("KV-HEAD-DIMS")
@pytest.mark.op("write_kv_cache")
@NARROW_EXAMPLES
@given(recipe=write_recipes(dims=MIXED_DIMS))
def test_value_dims_may_differ(backend, device, recipe):
    """Dk != Dv: each cache gets its own tensor's columns."""
    check_write(backend, device, recipe, clause="KV-HEAD-DIMS")


@pytest.mark.clause("KV-KEY-ONLY")
@pytest.mark.op("write_kv_cache")
@NARROW_EXAMPLES
@given(recipe=write_recipes(key_only=True, cache_layouts=("nhd", "hnd")), fp8=st.booleans())
def test_key_only_cache(backend, device, recipe, fp8):
    """MLA's latent cache: value and v_cache None, the key's every column written (bf16 or fp8)."""
    if fp8:
        recipe = dataclasses.replace(recipe, cache_dtype=FP8[recipe.seed % 2], scale_shape=(1,))
    check_write(backend, device, recipe, clause="KV-KEY-ONLY")


@pytest.mark.clause("KV-FP8")
@pytest.mark.op("write_kv_cache")
@given(recipe=write_recipes(fp8=True, pages=(1, 16, 128), cache_layouts=("nhd", "hnd")))
def test_fp8_write_quantizes_with_the_scale(backend, device, recipe):
    """fp8(clamp(fl32(x / scale_h), -M, M)), per-tensor and per-head scales, both fp8 formats."""
    check_write(backend, device, recipe, clause="KV-FP8")


@pytest.mark.clause("KV-FP8-SATURATE")
@pytest.mark.op("write_kv_cache")
@NARROW_EXAMPLES
@given(recipe=write_recipes(fp8=True, magnitudes=(1.5, 4.0), cache_layouts=("nhd",)))
def test_fp8_write_saturates(backend, device, recipe):
    """Quotients beyond M (and between 240 and 448 for fnuz) are stored as +-M, never NaN."""
    check_write(backend, device, recipe, clause="KV-FP8-SATURATE")


@pytest.mark.clause("KV-LARGE")
@pytest.mark.op("write_kv_cache")
def test_slots_past_2_31_are_written_where_they_say(backend, device):
    """A 2^31 + 2^12-slot fp8 cache (2 GiB, untouched but where written): int64 slots beyond 2^31."""
    total, bs = (1 << 31) + (1 << 12), 64
    cache = torch.empty(total // bs, bs, 1, 1, dtype=torch.float8_e4m3fn, device=device)
    flat = cache.view(-1)
    targets = [(1 << 31) + 5, (1 << 31) + 4094, (1 << 31) - 1, 3]
    aliases = [5, 4094, (1 << 31) + 3]  # where 32-bit truncation (or Python's negative index) lands
    flat[targets] = torch.zeros(4, device=device).to(cache.dtype)
    flat[aliases + [total - 1]] = torch.full((4,), 0.5, device=device).to(cache.dtype)
    key = torch.tensor([1.0, 2.0, 3.0, 4.0, 6.0], device=device).reshape(5, 1, 1)
    slots = torch.tensor(targets + [-1], dtype=torch.int64, device=device)
    backend.write_kv_cache(key, None, cache, None, slots, k_scale=torch.tensor(1.0, device=device))
    got = flat[targets + aliases + [total - 1]].float().cpu().tolist()
    check(got == [1.0, 2.0, 3.0, 4.0, 0.5, 0.5, 0.5, 0.5], clause="KV-LARGE",
          message=f"{describe(backend, device, 'write_kv_cache', slots=slots.tolist())}: slots {targets} and "
          f"the untouched {aliases + [total - 1]} hold {got}, expected [1, 2, 3, 4], then 0.5")  # fmt: skip


def _fp8_caches(batch, dtype, shape, generator):
    """The batch's caches quantized (KV-FP8) with scales near amax / M, and those scales."""
    out = []
    for cache in (batch.k_cache, batch.v_cache):
        heads = cache.shape[2]
        amax = cache.detach().cpu().float().abs().amax(dim=(0, 1, 3)).clamp_min(1e-3)  # [H]
        scale = (amax / kv_cache.FP8_MAX[dtype]) * (1 + torch.rand(heads, generator=generator))
        scale = scale.amax().reshape(shape) if len(shape) < 1 or shape == (1,) else scale
        out.append((kv_cache.quantize(cache.detach().cpu(), scale.reshape(-1).expand(heads), dtype), scale))
    return out


FP8_READ = serving_recipes(dtypes=F32, cache_layouts=("separate",), batch=2)


@pytest.mark.clause("KV-FP8-READ")
@pytest.mark.op("paged_attention")
@FP8_READ_EXAMPLES
@given(data=st.data(), recipe=FP8_READ, fp8=st.sampled_from(FP8))
def test_fp8_caches_are_read_with_their_scales(backend, device, data, recipe, fp8):
    """paged_attention on fp8 caches with k_scale / v_scale equals SERVE on value * scale; per-head
    scales (two kv heads, first in the draw order) as [Hkv], per-tensor ones as [] or [1]."""
    kind = data.draw(st.sampled_from(("per-head", "tensor", "one")), label="scale_kind")
    _check_fp8_read(backend, device, data, recipe, fp8, kind, clause="KV-FP8-READ")


@pytest.mark.clause("KV-METADATA-VIEWS")
@pytest.mark.op("paged_attention")
@profiles.should_examples(1 / 6)
@given(data=st.data(), recipe=FP8_READ, fp8=st.sampled_from(FP8))
def test_should_read_per_head_scale_views(backend, device, data, recipe, fp8):
    """Per-head k_scale / v_scale as every other element of a buffer, on the read: KV-FP8-READ's result."""
    _check_fp8_read(backend, device, data, recipe, fp8, "per-head view", clause="KV-METADATA-VIEWS")


def _check_fp8_read(backend, device, data, recipe, fp8, kind: str, *, clause: str) -> None:
    _skip_without_fp8(backend)
    if kind.startswith("per-head"):
        recipe = dataclasses.replace(recipe, kv_heads=2)
    opts = options(recipe, sliding_window=data.draw(windows(recipe), label="sliding_window"))
    batch = recipe.make(device)
    shape = (recipe.kv_heads,) if kind.startswith("per-head") else {"tensor": (), "one": (1,)}[kind]
    (k8, ks), (v8, vs) = _fp8_caches(batch, fp8, shape, torch.Generator().manual_seed(recipe.seed))
    view = strided_view if kind == "per-head view" else (lambda t: t)
    args, meta = batch.args()
    out = backend.paged_attention(args[0], k8.to(device), v8.to(device), **meta, **opts,
                                  k_scale=view(ks.to(device)), v_scale=view(vs.to(device)))  # fmt: skip
    cpu = batch.cpu().args()
    want = serving.paged_attention(cpu[0][0], k8, v8, **cpu[1], **opts, k_scale=ks, v_scale=vs)
    context = describe(
        backend, device, "paged_attention, fp8 caches", recipe=recipe, fp8=fp8, scale_shape=shape, scales=kind
    )
    compare(out, want, batch, clause=clause, context=context)


def _skip_without_fp8(backend) -> None:
    """A paged_attention without k_scale / v_scale reads no fp8 cache: not implemented, not wrong."""
    missing = signatures.missing_keywords(backend, "paged_attention")
    if missing:
        taken = ", ".join(missing)
        pytest.skip(f"not implemented: backend {backend.name!r}'s paged_attention takes no {taken} (fp8)")


def _round_trip_writes(batch):
    """Two write calls (the cached prefix, then the new tokens): (key, value, slot_mapping) each. A
    block shared with sequence 0 is written by sequence 0 only; the other sequences pass -1 there."""
    recipe, bs = batch.recipe, batch.recipe.block_size
    shared = 0 if recipe.contiguous else recipe.shared_prefix // bs
    calls = [([], [], []), ([], [], [])]
    for b, (keys, values, row) in enumerate(zip(batch.keys, batch.values, batch.ids, strict=True)):
        first_new = recipe.seq_lens[b] - recipe.query_lens[b]
        for p in range(recipe.seq_lens[b]):
            slot = -1 if b and p < shared * bs else row[p // bs] * bs + p % bs
            part = calls[p >= first_new]
            part[0].append(keys[p]), part[1].append(values[p]), part[2].append(slot)
    return [(torch.stack(k), torch.stack(v), torch.tensor(s)) for k, v, s in calls if s]


ROUND_TRIP = serving_recipes(dtypes=(torch.float32, torch.bfloat16), cache_layouts=("separate",),
                             q_layouts=("separate",), metadata_layouts=("contiguous",))  # fmt: skip


@pytest.mark.clause("KV-ROUND-TRIP")
@pytest.mark.op("write_kv_cache")
@READ_EXAMPLES
@given(data=st.data(), recipe=ROUND_TRIP)
def test_write_then_read_is_serve_on_the_originals(backend, device, data, recipe):
    """The backend's write into a NaN pool, then its paged_attention, equals SERVE on the original
    tensors (on KV-FP8's quantized originals for fp8 caches); every page size, NHD and HND."""
    reason = not_implemented_reason(backend, "paged_attention")
    if reason is not None:  # the read side is missing: the round trip is not implemented
        pytest.skip(reason)
    recipe = dataclasses.replace(recipe, block_size=data.draw(st.sampled_from(PAGE_SIZES), label="page_size"))
    fp8 = data.draw(st.sampled_from((None, None, *FP8)), label="fp8")
    assume(
        fp8 is None or not signatures.missing_keywords(backend, "paged_attention")
    )  # see _skip_without_fp8
    hnd = data.draw(st.booleans(), label="hnd")
    opts = options(recipe, sliding_window=data.draw(windows(recipe), label="sliding_window"))
    clean = recipe.make("cpu")
    dtype = fp8 or recipe.dtype
    scales = None if fp8 is None else [torch.tensor(s, dtype=torch.float32) for s in (0.05, 0.02)]
    pools = {}
    for where, impl in (("backend", backend), ("oracle", kv_cache)):
        on = device if where == "backend" else "cpu"
        shape = list(clean.k_cache.shape)
        caches = []
        for dim in (recipe.head_dim, recipe.value_dim):
            buffer = torch.full(
                [*shape[:3], dim] if not hnd else [shape[0], shape[2], shape[1], dim], float("nan")
            )
            buffer = buffer.to(dtype).to(on)
            caches.append(buffer.transpose(1, 2) if hnd else buffer)
        for key, value, slots in _round_trip_writes(clean):
            given_scales = {} if fp8 is None else {"k_scale": scales[0].to(on), "v_scale": scales[1].to(on)}
            slot_mapping = slots.to(recipe.index_dtype).to(on)
            impl.write_kv_cache(key.to(on), value.to(on), *caches, slot_mapping, **given_scales)
        pools[where] = caches
    read = {} if fp8 is None else {"k_scale": scales[0].to(device), "v_scale": scales[1].to(device)}
    batch = recipe.make(device)
    args, meta = batch.args()
    out = backend.paged_attention(args[0], *pools["backend"], **meta, **opts, **read)
    if fp8 is None:
        want = oracle(clean, opts)
    else:
        _, cpu_meta = clean.args()
        want = serving.paged_attention(clean.q, *pools["oracle"], **cpu_meta, **opts, k_scale=scales[0],
                                       v_scale=scales[1])  # fmt: skip
    context = describe(
        backend, device, "write_kv_cache then paged_attention", recipe=recipe, fp8=fp8, hnd=hnd, **opts
    )
    compare(out, want, batch, clause="KV-ROUND-TRIP", context=context)


@pytest.mark.clause("KV-ERRORS")
@pytest.mark.parametrize("case", params(ERRORS))
def test_should_reject_bad_input(backend, device, case):
    """Bad input raises the record's exception, naming the argument."""
    check_backend_raises(case, backend, device)
