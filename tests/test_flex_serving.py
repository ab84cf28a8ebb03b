"""flex and flex-compiled paged_attention (spec/serving.md) against the float64 oracle.

Deterministic cases; every case has Dv != Dqk (SERVE-HEAD-DIMS) and the same head counts, so
flex-compiled compiles once for all of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from backends import not_implemented_reason
from backends.flex import BACKEND, COMPILED
from conformance.checks import assert_close
from reference import serving

Q_HEADS, KV_HEADS, QK_DIM, V_DIM = 4, 2, 16, 8


@dataclass(frozen=True)
class Case:
    """One paged_attention call: query lengths n_b, sequence lengths L_b and the options."""

    query_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    block_size: int = 4
    window: int | None = None
    softcap: float | None = None
    sinks: bool = False
    poison: bool = False  # NaN in every slot the sequences must not read (SERVE-PAGED, SERVE-EVICT)


CASES = {
    "ragged-extend-permuted": Case((3, 1, 5, 9), (7, 4, 12, 9)),
    "window": Case((3, 1, 5, 9), (7, 4, 12, 9), window=3),
    "softcap": Case((3, 1, 5), (7, 4, 12), softcap=0.8),
    "sinks-window-softcap": Case((3, 1, 5), (7, 4, 12), window=4, softcap=1.5, sinks=True),
    "decode": Case((1, 1, 1), (6, 1, 13), window=5, sinks=True),
    "single-token-call": Case((1,), (10,), window=4),
    "block-size-1": Case((2, 4), (5, 4), block_size=1, window=2),
    "block-size-128": Case((3, 6), (130, 6), block_size=128, sinks=True),
    "poisoned-unread-nan": Case((2, 3), (11, 9), window=3, poison=True),
}


def make_args(case: Case, dtype=torch.float32) -> tuple[tuple, dict]:
    """Caches with the blocks of each sequence in a permuted order, one spare block, a table padded
    with -1; with ``poison``, NaN in every slot outside the keys e_b .. L_b - 1 each sequence sees."""
    gen = torch.Generator().manual_seed(len(case.seq_lens) * 1000 + sum(case.seq_lens))
    bs = case.block_size
    needed = [-(-length // bs) for length in case.seq_lens]
    pool = sum(needed) + 1
    ids = torch.randperm(pool, generator=gen)
    table = torch.full((len(needed), max(needed) + 1), -1, dtype=torch.int32)
    for b, start in enumerate(torch.tensor([0, *needed]).cumsum(0)[:-1].tolist()):
        table[b, : needed[b]] = ids[start : start + needed[b]]
    k_cache = torch.randn(pool, bs, KV_HEADS, QK_DIM, generator=gen, dtype=torch.float64)
    v_cache = torch.randn(pool, bs, KV_HEADS, V_DIM, generator=gen, dtype=torch.float64)
    q = torch.randn(sum(case.query_lens), Q_HEADS, QK_DIM, generator=gen, dtype=torch.float64)
    sinks = torch.randn(Q_HEADS, generator=gen, dtype=torch.float64) * 2 if case.sinks else None
    cu = torch.tensor([0, *case.query_lens], dtype=torch.int32).cumsum(0, dtype=torch.int32)
    kwargs = dict(block_table=table, cu_seqlens_q=cu, seq_lens=torch.tensor(case.seq_lens, dtype=torch.int32),
                  sliding_window=case.window, softcap=case.softcap, sinks=sinks, scale=0.5)  # fmt: skip
    if case.poison:
        read = torch.zeros(pool * bs, dtype=torch.bool)
        meta = serving.validate_paged_args(q, k_cache, v_cache, **kwargs)
        for b, length in enumerate(case.seq_lens):
            positions = torch.arange(meta.first_visible(b), length)
            read[table[b].long()[positions // bs] * bs + positions % bs] = True
        assert meta.first_visible(0) > 0 and not read.all(), "the case must evict and leave slots unread"
        for cache in (k_cache, v_cache):
            cache.view(pool * bs, KV_HEADS, -1)[~read] = math.nan
    return (q.to(dtype), k_cache.to(dtype), v_cache.to(dtype)), kwargs


def value_scale(case: Case, v_cache: torch.Tensor, kwargs: dict) -> torch.Tensor:
    """ATTN-TOL's absolute-term scale per query row: max(1, max |v_j|) over its sequence's keys."""
    table, bs = kwargs["block_table"].long(), case.block_size
    rows = []
    for b, (n, length) in enumerate(zip(case.query_lens, case.seq_lens, strict=True)):
        positions = torch.arange(length)
        values = v_cache[table[b][positions // bs], positions % bs].double().nan_to_num(0.0)
        rows.append(torch.full((n, 1, 1), max(1.0, values.abs().max().item())))
    return torch.cat(rows)


def _skip_unavailable(backend) -> None:
    reason = backend.unavailable(torch.device("cpu"))
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.parametrize("flex", [BACKEND, COMPILED], ids=lambda b: b.name)
@pytest.mark.parametrize("name", list(CASES))
def test_paged_attention_matches_oracle(flex, name):
    """SERVE and its clauses: float32 output within ATTN-TOL of the float64 oracle."""
    _skip_unavailable(flex)
    case = CASES[name]
    (q, k_cache, v_cache), kwargs = make_args(case)
    want = serving.paged_attention(q, k_cache, v_cache, **kwargs)
    assert want.isfinite().all(), "the oracle reads no poisoned slot"
    out = flex.paged_attention(q, k_cache, v_cache, **kwargs)
    assert_close(out, want, clause="SERVE", family="attention", context=f"{flex.name} {name}",
                 atol_scale=value_scale(case, v_cache, kwargs), dtype=q.dtype, device=q.device)  # fmt: skip


def test_bfloat16_sinks_and_softcap():
    """SERVE-SINKS, SERVE-SOFTCAP in bfloat16 (eager flex: a compiled dtype costs seconds of compile):
    sinks in float32, the output in q's dtype."""
    flex = BACKEND
    case = CASES["sinks-window-softcap"]
    (q, k_cache, v_cache), kwargs = make_args(case, torch.bfloat16)
    kwargs["sinks"] = kwargs["sinks"].float()
    want = serving.paged_attention(q, k_cache, v_cache, **kwargs)
    out = flex.paged_attention(q, k_cache, v_cache, **kwargs)
    assert_close(out, want, clause="SERVE-SINKS", family="attention", context=f"{flex.name} bf16",
                 atol_scale=value_scale(case, v_cache, kwargs), dtype=torch.bfloat16)  # fmt: skip


def test_compiled_examples_do_not_recompile():
    """New batches, lengths, block sizes, windows, softcaps and sinks add no compiled graph."""
    _skip_unavailable(COMPILED)
    from torch._dynamo.utils import counters

    (q, k_cache, v_cache), kwargs = make_args(CASES["window"])
    COMPILED.paged_attention(q, k_cache, v_cache, **kwargs)
    before = counters["stats"]["unique_graphs"]
    for name in ("softcap", "decode", "single-token-call", "block-size-1", "block-size-128"):
        (q, k_cache, v_cache), kwargs = make_args(CASES[name])
        COMPILED.paged_attention(q, k_cache, v_cache, **kwargs)
    assert counters["stats"]["unique_graphs"] == before


@pytest.mark.parametrize("window", [None, 1, 7])
def test_window_kernel_args_keep_the_window(window):
    """SERVE-WINDOW-ARGS: extend and decode rows both keep exactly W keys."""
    args = BACKEND.window_kernel_args(window)
    assert [serving.window_keys(args[kind]) for kind in ("prefill", "decode")] == [window, window]


def test_layer_windows_is_not_implemented():
    """SERVE-LAYER-WINDOWS is config parsing, declared absent with its reason."""
    assert "config parsing" in not_implemented_reason(BACKEND, "layer_windows")


def test_errors_are_the_oracles():
    """SERVE-ERRORS: the same ValueError as the oracle (shared validation)."""
    (q, k_cache, v_cache), kwargs = make_args(CASES["window"])
    kwargs["seq_lens"] = kwargs["seq_lens"].float()
    with pytest.raises(ValueError, match="seq_lens"):
        serving.paged_attention(q, k_cache, v_cache, **kwargs)
    with pytest.raises(ValueError, match="seq_lens"):
        BACKEND.paged_attention(q, k_cache, v_cache, **kwargs)


def test_a_padded_request_reading_nan_leaves_the_real_rows():
    """PAD-SERVE-NAN regression: a padded request (one query, length 1) reads a null block of NaN
    after two real sequences; the packed call used to multiply that NaN by the real rows' masked
    probability 0, so every real row came back NaN. The real rows are the oracle's, finite."""
    case = CASES["ragged-extend-permuted"]
    (q, k_cache, v_cache), kwargs = make_args(case)
    null = torch.full((1, *k_cache.shape[1:]), math.nan), torch.full((1, *v_cache.shape[1:]), math.nan)
    padded_caches = (torch.cat([null[0], k_cache]), torch.cat([null[1], v_cache]))
    table = kwargs["block_table"]
    table = torch.cat([torch.where(table >= 0, table + 1, table), torch.zeros_like(table[:1])])  # 0: null
    padded = dict(kwargs, block_table=table,
                  cu_seqlens_q=torch.cat([kwargs["cu_seqlens_q"], kwargs["cu_seqlens_q"][-1:] + 1]),
                  seq_lens=torch.cat([kwargs["seq_lens"], torch.ones(1, dtype=torch.int32)]))  # fmt: skip
    out = BACKEND.paged_attention(torch.cat([q, q[:1]]), *padded_caches, **padded)
    want = serving.paged_attention(q, k_cache, v_cache, **kwargs)
    real = q.shape[0]
    assert out[:real].isfinite().all() and out[real:].isnan().all(), "only the padded row reads the NaN"
    assert_close(out[:real], want, clause="PAD-SERVE-NAN", family="attention", context="flex, padded request",
                 atol_scale=value_scale(case, v_cache, kwargs), dtype=q.dtype)  # fmt: skip
