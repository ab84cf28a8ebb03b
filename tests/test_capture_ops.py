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
from opconform.capture.ops import NOT_REPLAYABLE, REPLAY_OPS
from opconform.capture.recorder import WRITTEN

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
        assert row.judge is not None or row.family in TOLERANCES, row.op


@pytest.mark.parametrize("row", SAMPLED, ids=lambda r: r.op)
def test_native_passes_each_row_and_a_perturbed_output_fails(row):
    generator = torch.Generator().manual_seed(0)
    inputs, options = row.sample(generator, torch.float32)
    before = {name: t.clone() for name, t in inputs.items()}  # an in-place op writes into inputs
    args, keywords = row.arguments(inputs, options)
    out = getattr(NATIVE, row.op)(*args, **options, **keywords)
    if row.op in WRITTEN:  # its outputs: the written arguments after the call, as the recorder keeps them
        out, inputs = tuple(inputs[n] for n in WRITTEN[row.op]), before
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


# Each new row on a realistic wrong kernel: the recorded output of a kernel that got one thing
# wrong fails under the row's clause (the row's correct counterpart passes in the test above).
def _fails(op, inputs, options, outputs):
    row = REPLAY_OPS[op]
    with pytest.raises(ConformanceError, match=row.clause):
        compare(row, inputs, options, outputs, context=op)


def _sample(op, seed=0):
    return REPLAY_OPS[op].sample(torch.Generator().manual_seed(seed), torch.float32)


def test_paged_attention_row_catches_ignored_sinks_and_an_ignored_fp8_scale():
    inputs, options = _sample("paged_attention")
    row = REPLAY_OPS["paged_attention"]
    args, keywords = row.arguments(inputs, options)
    _fails(
        "paged_attention",
        inputs,
        options,
        [NATIVE.paged_attention(*args, **options, **{**keywords, "sinks": None})],
    )
    # fp8 caches with per-tensor scales (KV-FP8-READ): the scale is part of what the row judges
    k8, v8 = (inputs[n].to(torch.float8_e4m3fn) for n in ("k_cache", "v_cache"))
    scales = {"k_scale": torch.tensor(0.5), "v_scale": torch.tensor(2.0)}
    fp8 = {**inputs, "k_cache": k8, "v_cache": v8, **scales}
    fp8_options = {k: v for k, v in options.items() if k not in scales}
    args, keywords = row.arguments(fp8, fp8_options)
    right = NATIVE.paged_attention(*args, **fp8_options, **keywords)
    compare(row, fp8, fp8_options, [right], context="fp8")
    unscaled = NATIVE.paged_attention(*args, **fp8_options, **{**keywords, "v_scale": torch.tensor(1.0)})
    _fails("paged_attention", fp8, fp8_options, [unscaled])


def test_attention_row_judges_the_recorded_mask():
    inputs, options = _sample("attention")
    q, k, v, allowed = (inputs[n] for n in ("q", "k", "v", "allowed"))
    everything = NATIVE.attention(q, k, v, allowed=torch.ones_like(allowed), scale=options["scale"])
    _fails("attention", inputs, options, [everything])


def test_routing_row_accepts_any_slot_order_and_catches_a_wrong_expert():
    inputs, options = _sample("select_experts")
    routing = {k: v for k, v in options.items() if k != "correction_bias"}
    weights, ids = NATIVE.select_experts(inputs["router_logits"], correction_bias=None, **routing)
    compare(
        REPLAY_OPS["select_experts"], inputs, options, [weights.flip(-1), ids.flip(-1)], context="flipped"
    )
    worst = inputs["router_logits"].argmin(-1)  # each token's last choice for its second slot
    wrong = ids.clone()
    wrong[:, 1] = worst
    _fails("select_experts", inputs, options, [weights, wrong])


def test_fused_moe_row_catches_dropped_routing_weights():
    inputs, options = _sample("fused_moe")
    args, _ = REPLAY_OPS["fused_moe"].arguments(inputs, options)
    args[3] = torch.ones_like(args[3])  # each expert's output summed unweighted
    _fails("fused_moe", inputs, options, [NATIVE.fused_moe(*args, **options)])


@pytest.mark.parametrize("op", ["rotary_embedding", "mrope"])
def test_rope_rows_judge_query_and_key_and_catch_the_wrong_pairing(op):
    inputs, options = _sample(op)
    args, _ = REPLAY_OPS[op].arguments(inputs, options)
    query, key = getattr(NATIVE, op)(*args, **options)
    gptj = getattr(NATIVE, op)(*args, **{**options, "is_neox_style": False})  # GPT-J pairs for NeoX
    _fails(op, inputs, options, list(gptj))
    _fails(op, inputs, options, [query, gptj[1]])  # the key alone wrong: each output is judged
    if op == "mrope":  # Qwen3-VL's interleaved sections for Qwen2-VL's bands
        _fails(op, inputs, options, list(NATIVE.mrope(*args, **{**options, "mrope_interleaved": True})))


def test_cos_sin_row_catches_a_missing_attention_factor():
    inputs, _ = _sample("rope_cos_sin")
    options = {"attention_factor": 1.35}
    plain = NATIVE.rope_cos_sin(inputs["positions"], inputs["inv_freq"], attention_factor=1.0)
    compare(REPLAY_OPS["rope_cos_sin"], inputs, options, [plain * 1.35], context="scaled")
    _fails("rope_cos_sin", inputs, options, [plain])


def test_clamped_activation_rows_catch_their_look_alikes():
    inputs, options = _sample("silu_clamped_and_mul")
    x, limit = inputs["x"], options["limit"]
    step = NATIVE.swiglu_step_and_mul(x, limit=limit)  # clamp after the SiLU (ACT-CLAMP-ORDER)
    _fails("silu_clamped_and_mul", inputs, options, [step])
    inputs, options = _sample("swiglu_oai_and_mul")
    halves = NATIVE.swiglu_oai_and_mul(inputs["x"], **{**options, "interleaved": False})
    _fails("swiglu_oai_and_mul", inputs, options, [halves])


def _paged_mapping(q, k_cache, v_cache, **keywords):
    return {"q": q, "k_cache": k_cache, "v_cache": v_cache, **keywords}


def _rope_mapping(positions, query, key, cos_sin_cache, **options):
    return {"positions": positions, "query": query, "key": key, "cos_sin_cache": cos_sin_cache, **options}


def _write_mapping(key, value, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
    return {"key": key, "value": value, "k_cache": k_cache, "v_cache": v_cache, "slot_mapping": slot_mapping,
            "k_scale": k_scale, "v_scale": v_scale}  # fmt: skip


def _write_padding_too(key, value, k_cache, v_cache, slot_mapping, **scales):
    """The padded token (slot -1) written too: negative indexing lands it in the pool's last slot."""
    slots = k_cache.shape[0] * k_cache.shape[1]
    for cache, rows in ((k_cache, key), (v_cache, value)):
        cache.view(slots, *cache.shape[2:])[slot_mapping.long() % slots] = rows


def test_new_rows_replay_from_a_capture_into_the_results_document(tmp_path):
    """paged_attention (block table, cu_seqlens_q, seq_lens, caches, sinks and the None scales
    recorded), rotary_embedding and write_kv_cache (caches before and after the call) captured
    through Capture.wrap and replayed: exactly the calls of the kernel that ignores the sinks and
    of the one that writes the padded token fail, under SERVE and KV-WRITE, naming their layers."""
    from conformance.results import Outcome
    from opconform.capture import Capture
    from opconform.capture.judge import replay

    inputs, options = _sample("paged_attention")
    rope_inputs, rope_options = _sample("rotary_embedding")
    metadata = {n: inputs[n] for n in ("block_table", "cu_seqlens_q", "seq_lens", "sinks")}
    with Capture(tmp_path, source="port") as cap:
        for layer, honours_sinks in (("attn.0", True), ("attn.1", False)):

            def kernel(q, k_cache, v_cache, *, sinks, honours_sinks=honours_sinks, **meta):
                return NATIVE.paged_attention(
                    q, k_cache, v_cache, sinks=sinks if honours_sinks else None, **meta
                )

            wrapped = cap.wrap(kernel, "paged_attention", _paged_mapping, name=layer)
            wrapped(inputs["q"], inputs["k_cache"], inputs["v_cache"], **options, **metadata)
        rope = cap.wrap(NATIVE.rotary_embedding, "rotary_embedding", _rope_mapping, name="rope")
        rope(*(rope_inputs[n] for n in ("positions", "query", "key", "cos_sin_cache")), **rope_options)
        for layer, kernel in (("kv.0", NATIVE.write_kv_cache), ("kv.1", _write_padding_too)):
            write = cap.wrap(kernel, "write_kv_cache", _write_mapping, name=layer)
            written, _ = _sample("write_kv_cache")
            write(*(written[n] for n in ("key", "value", "k_cache", "v_cache", "slot_mapping")))
    document, problems = replay(tmp_path)
    assert problems == [] and len(document.results) == 5
    failed = [c for c in document.results if c.outcome == Outcome.FAILED]
    assert [c.nodeid for c in failed] == [
        "replay::attn.1::call0::paged_attention", "replay::kv.1::call0::write_kv_cache"
    ]  # fmt: skip
    assert [c.failure.clause for c in failed] == ["SERVE", "KV-WRITE"]
    assert "layer attn.1 call 0" in failed[0].message and "k_cache after the call" in failed[1].message
    rerun, _ = replay(tmp_path, backend=NATIVE)  # the native backend on the recorded inputs: all conform
    assert {c.outcome for c in rerun.results} == {Outcome.PASSED}
    assert {c.outcome for c in document.results} - {Outcome.FAILED} == {Outcome.PASSED}
