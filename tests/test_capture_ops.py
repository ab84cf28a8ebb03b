"""The replay table (opconform.capture.ops): every op of backends.OPS is either judged by a row
or listed as not replayable with its reason; each row's oracle and clause exist; a correct
implementation (the native backend) passes each row's comparison and a perturbed output fails it."""

from __future__ import annotations

import pytest
import torch

from backends import OPS
from backends.native import BACKEND as NATIVE
from conformance import spec_index
from conformance.errors import ConformanceError
from opconform.capture.judge import compare
from opconform.capture.ops import KEYWORD_TENSORS, NOT_REPLAYABLE, REPLAY_OPS

SAMPLED = [row for row in REPLAY_OPS.values() if row.sample is not None]


def test_every_op_is_replayable_or_says_why_not():
    assert not set(REPLAY_OPS) & set(NOT_REPLAYABLE), "an op is both replayable and not"
    missing = set(OPS) - set(REPLAY_OPS) - set(NOT_REPLAYABLE)
    assert not missing, (
        f"ops of backends.OPS with no replay row and no reason in NOT_REPLAYABLE: {sorted(missing)}"
    )
    unknown = (set(REPLAY_OPS) | set(NOT_REPLAYABLE)) - set(OPS)
    assert not unknown, f"rows for ops not in backends.OPS: {sorted(unknown)}"
    assert all(isinstance(why, str) and why for why in NOT_REPLAYABLE.values())


def test_each_row_names_a_real_oracle_clause_and_tolerance_family():
    from conformance.tolerances import TOLERANCES

    clauses = spec_index.load_clauses()
    for row in REPLAY_OPS.values():
        assert callable(row.oracle_function()), row.op
        assert row.clause in clauses, f"{row.op}: unknown clause {row.clause}"
        assert row.family in TOLERANCES, row.op


@pytest.mark.parametrize("row", SAMPLED, ids=lambda r: r.op)
def test_native_passes_each_row_and_a_perturbed_output_fails(row):
    generator = torch.Generator().manual_seed(0)
    inputs, options = row.sample(generator, torch.float32)
    args = [inputs[n] for n in row.tensors if n not in KEYWORD_TENSORS]
    out = getattr(NATIVE, row.op)(*args, **options)
    outputs = list(out) if isinstance(out, tuple) else [out]
    compare(row, inputs, options, outputs, context=row.op)
    outputs[0] = outputs[0] * (1 + 1e-3)
    with pytest.raises(ConformanceError, match=row.clause):
        compare(row, inputs, options, outputs, context=row.op)


def test_attention_rows_pass_native_and_catch_a_wrong_scale():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    pad = torch.tensor([[True, True, True, True, False]])
    inputs, options = (
        {"q": q, "k": k, "v": v, "padding_mask": pad},
        {"sliding_window": None, "scale": 8**-0.5},
    )
    row = REPLAY_OPS["prefill_attention"]
    out = NATIVE.prefill_attention(q, k, v, padding_mask=pad, **options)
    compare(row, inputs, options, [out], context="prefill")
    wrong = NATIVE.prefill_attention(q, k, v, padding_mask=pad, sliding_window=None, scale=1.0)
    with pytest.raises(ConformanceError, match="ATTN-PREFILL"):
        compare(row, inputs, options, [wrong], context="prefill")
    seq_lens = torch.tensor([3])
    k_cache, v_cache = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    dq = torch.randn(1, 4, 1, 8)
    dec = {"q": dq, "k_cache": k_cache, "v_cache": v_cache, "seq_lens": seq_lens}
    out = NATIVE.decode_attention(dq, k_cache, v_cache, seq_lens, **options)
    compare(REPLAY_OPS["decode_attention"], dec, options, [out], context="decode")
