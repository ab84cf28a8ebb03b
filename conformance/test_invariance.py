"""Conformance properties for spec/invariance.md, the row-wise ops: DET-RUN, INV-ROW, INV-PERM.

Gated on the backend's promises (``@pytest.mark.promise``: conformance/promises.py); a backend that
does not make one gets n/i at setup. Each property runs its first side twice (DET-RUN, first),
then compares bitwise (conformance/invariance_checks.py) with the guards of INV-VACUITY. The
attention clauses are in test_invariance_attention.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.checks import describe
from conformance.errors import ConformanceError
from conformance.harness import profiles
from conformance.invariance_checks import Side, check_bitwise, check_informative, check_repeat
from conformance.strategies.invariance import ROW_DTYPES, RowBatches, row_batches, spread

# Bits differ on most draws of a broken kernel (the exponent spread): a quarter of the examples.
EXAMPLES = profiles.share_of_examples(1 / 4)
# DET-RUN alone, for backends that promise determinism without batch invariance (INV-ROW's property
# checks it first for the others): a sixth.
DET_EXAMPLES = profiles.share_of_examples(1 / 6)
EPS = 1e-6


@dataclass(frozen=True)
class RowOp:
    """How to draw an op's per-row inputs (row dim first) and its shared ones, and how to call it."""

    rows: object  # (gen, n, width, dtype, options) -> tuple of tensors with n rows
    shared: object  # (gen, width, dtype, options) -> tuple of tensors
    call: object  # (backend, rows, shared, options) -> output(s)


def _experts(gen, n, width, dtype, o):
    ids = torch.stack([torch.randperm(o["experts"], generator=gen)[: o["top_k"]] for _ in range(n)])
    return spread(gen, n, width, dtype=dtype), torch.rand(n, o["top_k"], generator=gen), ids


def _logits(gen, n, width, dtype, o):
    # A coarse grid (halves in [-1, 1]): exact ties at the k-th score are common (vllm#50979).
    return ((torch.randint(-2, 3, (n, o["experts"]), generator=gen) / 2).to(dtype),)


ROW_OPS = {
    "rms_norm": RowOp(
        lambda gen, n, w, dt, o: (spread(gen, n, w, dtype=dt),),
        lambda gen, w, dt, o: (spread(gen, w, dtype=dt) / 8,),
        lambda b, rows, shared, o: b.rms_norm(*rows, *shared, eps=EPS),
    ),
    "fused_add_rms_norm": RowOp(
        lambda gen, n, w, dt, o: (spread(gen, n, w, dtype=dt), spread(gen, n, w, dtype=dt)),
        lambda gen, w, dt, o: (spread(gen, w, dtype=dt) / 8,),
        lambda b, rows, shared, o: b.fused_add_rms_norm(*rows, *shared, eps=EPS),
    ),
    "silu_and_mul": RowOp(
        lambda gen, n, w, dt, o: (spread(gen, n, 2 * w, dtype=dt) / 64,),
        lambda gen, w, dt, o: (),
        lambda b, rows, shared, o: b.silu_and_mul(*rows),
    ),
    "select_experts": RowOp(
        _logits,
        lambda gen, w, dt, o: (),
        lambda b, rows, shared, o: b.select_experts(
            *rows,
            top_k=o["top_k"],
            scoring=o["scoring"],
            renormalize=o["renormalize"],
            correction_bias=None,
            num_groups=1,
            topk_group=1,
            group_score="max",
            routed_scaling_factor=1.0,
        ),  # fmt: skip
    ),
    "fused_moe": RowOp(
        _experts,
        lambda gen, w, dt, o: (
            spread(gen, o["experts"], 2 * o["inter"], w, dtype=dt) / 64,
            spread(gen, o["experts"], w, o["inter"], dtype=dt) / 64,
        ),  # fmt: skip
        lambda b, rows, shared, o: b.fused_moe(
            rows[0],
            *shared,
            rows[1],
            rows[2],
            activation=o["activation"],
            limit=o["limit"],
            apply_router_weight_on_input=False,
            output_scale=1.0,
        ),  # fmt: skip
    ),
}


@st.composite
def op_options(draw) -> dict:
    """The routing and expert options (few: the reduction order is what is judged, not the forms)."""
    experts = draw(st.sampled_from((4, 8, 16)), label="experts")
    return dict(experts=experts, top_k=draw(st.sampled_from((1, 2, 4)), label="top_k"),
                scoring=draw(st.sampled_from(("softmax", "sigmoid")), label="scoring"),
                renormalize=draw(st.booleans(), label="renormalize"), inter=draw(st.sampled_from((2, 3, 8))),
                activation=draw(st.sampled_from(("silu", "swiglustep", "swiglu_oai")), label="activation"),
                limit=draw(st.sampled_from((None, 7.0)), label="limit"))  # fmt: skip


def _on(tensors, device) -> tuple:
    return tuple(t.clone().to(device) for t in tensors)


def _outputs(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _judge_rows(backend, device, op, batches: RowBatches, width, dtype, options) -> None:
    spec, gen = ROW_OPS[op], torch.Generator().manual_seed(batches.seed)
    shared = spec.shared(gen, width, dtype, options)
    large = spec.rows(gen, batches.large, width, dtype, options)
    small = tuple(f.clone() for f in spec.rows(gen, batches.small, width, dtype, options))
    picked, positions = list(batches.picked), list(batches.small_positions)
    for s, whole in zip(small, large, strict=True):
        s[positions] = whole[picked]
    sides = (Side(f"batch of {batches.small} rows", batches.small_positions),
             Side(f"batch of {batches.large} rows", batches.picked))  # fmt: skip
    context = describe(backend, device, op, dtype=dtype, width=width)

    def run(rows):
        return spec.call(backend, _on(rows, device), _on(shared, device), options)

    got_large = check_repeat(lambda: run(large), context=context, side=sides[1])  # DET-RUN first
    check_informative(torch.cat([o.detach().cpu().double().reshape(batches.large, -1) for o in got_large], 1),
                      context=context)  # fmt: skip
    for i, (a, b) in enumerate(zip(_outputs(run(small)), got_large, strict=True)):
        check_bitwise(
            a[positions], b[picked], clause="INV-ROW", context=f"{context}: output {i}", sides=sides
        )


ROW_OP_PARAMS = [
    pytest.param(op, marks=[pytest.mark.op(op), pytest.mark.promise("batch_invariant")], id=op)
    for op in ROW_OPS
]
DET_PARAMS = [pytest.param(op, marks=[pytest.mark.op(op), pytest.mark.promise("deterministic")], id=op)
              for op in ROW_OPS]  # fmt: skip


@pytest.mark.clause("DET-RUN", "INV-VACUITY")
@pytest.mark.parametrize("op", DET_PARAMS)
@DET_EXAMPLES
@given(rows=st.sampled_from((9, 64, 257)), width=st.integers(8, 48), dtype=st.sampled_from(ROW_DTYPES),
       options=op_options(), seed=st.integers(0, 2**31 - 1))  # fmt: skip
def test_same_inputs_give_the_same_bits(backend, device, op, rows, width, dtype, options, seed):
    """DET-RUN: one batch, run twice on fresh copies, gives the same bits in every output."""
    spec, gen = ROW_OPS[op], torch.Generator().manual_seed(seed)
    inputs = spec.rows(gen, rows, width, dtype, options), spec.shared(gen, width, dtype, options)
    side = Side(f"batch of {rows} rows", tuple(range(rows)))
    context = describe(backend, device, op, dtype=dtype, width=width)
    outputs = check_repeat(lambda: spec.call(backend, *(_on(t, device) for t in inputs), options),
                           context=context, side=side)  # fmt: skip
    check_informative(
        torch.cat([o.detach().cpu().double().reshape(rows, -1) for o in outputs], 1), context=context
    )


@pytest.mark.clause("INV-ROW", "DET-RUN", "INV-VACUITY")
@pytest.mark.parametrize("op", ROW_OP_PARAMS)
@EXAMPLES
@given(
    batches=row_batches(), width=st.integers(8, 48), dtype=st.sampled_from(ROW_DTYPES), options=op_options()
)
def test_a_row_has_the_same_bits_in_any_batch(backend, device, op, batches, width, dtype, options):
    """INV-ROW: rows of a batch of 8 to 300 give the same bits at other positions of a batch of 2 to 7."""
    _judge_rows(backend, device, op, batches, width, dtype, options)


@pytest.mark.clause("INV-PERM", "DET-RUN", "INV-VACUITY")
@pytest.mark.op("fused_moe")
@pytest.mark.promise("batch_invariant")
@EXAMPLES
@given(rows=st.sampled_from((8, 16, 64, 257)), width=st.integers(8, 32), dtype=st.sampled_from(ROW_DTYPES),
       options=op_options(), seed=st.integers(0, 2**31 - 1))  # fmt: skip
def test_the_order_of_an_experts_rows_changes_no_bit(backend, device, rows, width, dtype, options, seed):
    """INV-PERM: permuting the tokens (and their routing) permutes fused_moe's rows, bit for bit; the
    positive control: without un-permuting, the rows differ."""
    spec, gen = ROW_OPS["fused_moe"], torch.Generator().manual_seed(seed)
    shared = spec.shared(gen, width, dtype, options)
    tokens = spec.rows(gen, rows, width, dtype, options)
    perm = torch.randperm(rows, generator=gen)
    if bool((perm == torch.arange(rows)).all()):
        perm[[0, 1]] = perm[[1, 0]]
    context = describe(backend, device, "fused_moe", dtype=dtype, width=width, **options)

    def run(rows_in):
        return spec.call(backend, _on(rows_in, device), _on(shared, device), options)

    side = Side(f"batch of {rows} tokens", tuple(range(rows)))
    (plain,) = check_repeat(lambda: run(tokens), context=context, side=side)
    check_informative(plain, context=context)
    permuted = run(tuple(t[perm] for t in tokens))
    if torch.equal(permuted.cpu(), plain.cpu()):  # the positive control (INV-VACUITY)
        message = f"{context}: the permuted batch gave the unpermuted rows: a permutation goes unseen"
        raise ConformanceError("INV-VACUITY", message, relation="rows ignore the order")
    sides = (Side(f"the same {rows} tokens permuted", tuple(perm.tolist())), side)
    check_bitwise(permuted, plain[perm], clause="INV-PERM", context=context, sides=sides)
