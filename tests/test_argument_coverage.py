"""No op argument is held constant by every property that calls it (issue 18, item 16).

The whole suite runs once against ``recording`` (tests/recording_backend.py: the built-in ops,
recording every call), in the ci profile's derandomized examples (5 per property: the same
constant arguments as 10 and 30, measured), without the bad-input properties
(`test_should_reject_bad_input`, the float-mask rejection): a bad input is no variation of a
valid argument (with them, seq_lens' dtype and the mask's device counted as varied). For every
op of ``backends.OPS`` and every argument of its protocol signature, each aspect must take at
least two distinct values across the suite: a scalar's or option's value (being omitted counts
as a value), a tensor's dtype and its layout (contiguous or strided), and for an attention
``scale`` whether it is the conventional 1/sqrt(D) (a kernel ignoring the passed scale conformed
while only that was drawn). An argument always a tensor has no value aspect. ``HOLDOUTS`` lists
the known exceptions, each with its reason; the table must equal what the run finds, so a new
constant argument fails, and so does a holdout once fixed (remove its row).

The same recording checks the range rules (conformance/strategies/ranges, spec/README.md Ranges):
every family's sizes past the field's tiles, odd and real non-powers of two, thresholds at T - 1, T
and T + 1, low-precision near-ties and config keys without their switches; each rule is shown to
fail on the recording with its region taken out.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

from suite_runner import REPO, produced_once

from backends.protocols import OPS
from conformance.strategies import ranges

RANGES_KEY = "(ranges)"  # tests/recording_backend.py's key of the range measures

# (op, argument, aspect) -> why it is constant today; "*"/"called": no built-in backend has the op
# (WINDOW-CONV parametrizes its sliding_window over None and five windows for whoever has it).
HOLDOUTS: dict[tuple[str, str, str], str] = {
    ("flash_attention_window", "*", "called"): "no built-in backend implements it: nothing to record",
    # --- KV-cache write (spec/kv_cache.md) ---
    **{
        (op, scale, "dtype"): "fp8 scales are float32 by contract (KV-FP8; another dtype is KV-ERRORS)"
        for op in ("write_kv_cache", "paged_attention")
        for scale in ("k_scale", "v_scale")
    },
    # --- quant (spec/quant.md): the operands' dtypes are the contract; the field's quant kernels take
    # contiguous tensors (vLLM's TORCH_CHECK(input.is_contiguous()), QUANT-INT8-SCALE's Sources) ---
    **{
        (
            op,
            argument,
            "dtype",
        ): "int8 / fp8 / int32-packed operands and float32 scales by contract (QUANT-ERRORS)"
        for op, argument in (
            ("int8_scaled_mm", "a"),
            ("int8_scaled_mm", "b"),
            ("int8_scaled_mm", "scale_a"),
            ("int8_scaled_mm", "scale_b"),
            ("fp8_quant", "scale"),
            ("fp8_block_scaled_mm", "a_scales"),
            ("fp8_block_scaled_mm", "b_scales"),
            ("fp8_fn_to_fnuz", "weight"),
            ("fp8_fn_to_fnuz", "weight_scale"),
            ("fp8_fn_to_fnuz", "input_scale"),
            ("w4a16_mm", "qweight"),
            ("w4a16_mm", "qzeros"),
        )
    },
    **{
        (op, argument, "layout"): "contiguous: the field's quant kernels check it (spec/quant.md)"
        for op, argument in (
            ("dynamic_int8_quant", "x"),
            ("fp8_quant", "x"),
            ("fp8_quant", "scale"),
            ("fp8_group_quant", "x"),
            ("int8_scaled_mm", "a"),
            ("int8_scaled_mm", "bias"),
            ("int8_scaled_mm", "scale_a"),
            ("int8_scaled_mm", "scale_b"),
            ("fp8_block_scaled_mm", "a"),
            ("fp8_block_scaled_mm", "b"),
            ("fp8_block_scaled_mm", "a_scales"),
            ("fp8_block_scaled_mm", "b_scales"),
            ("fp8_fn_to_fnuz", "weight"),
            ("fp8_fn_to_fnuz", "weight_scale"),
            ("fp8_fn_to_fnuz", "input_scale"),
            ("w4a16_mm", "x"),
            ("w4a16_mm", "qweight"),
            ("w4a16_mm", "scales"),
            ("w4a16_mm", "qzeros"),
        )
    },
    ("fp8_block_scaled_mm", "block_size", "value"): "[128, 128], the weight_block_size of every released "
    "block-fp8 checkpoint (QUANT-FP8-BLOCK-MM)",
}
# The second rule: a config-reading op's properties pass configs that leave out each optional field
# (a wrapper's own default is where it goes wrong). (op, argument) -> (the clause naming the field's
# default, the optional fields); dpm_scheduler's keywords are all optional (DPM-CONSTRUCT).
CONFIG_FIELDS = {
    ("layer_windows", "config"): (
        "SERVE-LAYER-WINDOWS",
        ("layer_types", "use_sliding_window", "sliding_window_pattern", "max_window_layers"),
    ),
    ("swiglu_limit", "config"): ("ACT-LIMIT-CONFIG", ("swiglu_limits", "swiglu_limits_shared")),
    ("moe_router_config", "config"): ("MOE-CONFIG", ("num_experts_per_tok", "n_group", "topk_group",
                                      "norm_topk_prob", "routed_scaling_factor", "topk_method",
                                      "moe_router_scaling_factor")),
    ("rope_inv_freq", "config"): (
        "ROPE-PARAMS",
        ("rope_parameters", "rope_theta", "head_dim", "partial_rotary_factor",
         "original_max_position_embeddings"),
    ),
    ("rope_softmax_scale", "config"): ("ROPE-PARAMS", ("rope_parameters", "head_dim")),
}  # fmt: skip


def constant_aspects(record: dict, ops) -> set[tuple[str, str, str]]:
    """(op, argument, aspect) for every aspect ``record`` saw with fewer than two values; an op
    never called is (op, "*", "called")."""
    found = set()
    for op in ops:
        if op not in record:
            found.add((op, "*", "called"))
            continue
        for argument, aspects in record[op].items():
            for aspect, seen in aspects.items():
                if aspect == "value" and seen == ["tensor"]:
                    continue  # always a tensor: its dtype and layout are the aspects
                if len(set(seen)) < 2:
                    found.add((op, argument, aspect))
    return found


def _record(root) -> dict:
    path = root / "record.json"
    env = {**os.environ, "OPCONFORM_RECORD": str(path), "OPCONFORM_RECORD_EXAMPLES": "5"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), str(REPO), os.environ.get("PYTHONPATH", "")])
    env.pop("PYTEST_XDIST_WORKER", None)
    command = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:xdist",
               "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "recording_backend",
               "--hypothesis-profile=opconform-record", "--backend-module=recording_backend",
               "--device=cpu", "-k", "not should_reject"]  # fmt: skip
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    # The verdicts do not matter here (the diffusers scheduler's declared DPM-SDE3 bug fails).
    assert path.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(path.read_text())


def test_no_op_argument_is_constant_across_the_suite(tmp_path_factory):
    record = produced_once(tmp_path_factory, "opconform-argument-record", _record)
    found = constant_aspects(record, OPS)
    new = sorted(found - set(HOLDOUTS))
    fixed = sorted(set(HOLDOUTS) - found)
    assert not new, f"held constant by every property that calls the op (vary them, spec/README.md): {new}"
    assert not fixed, f"no longer constant: remove from HOLDOUTS: {fixed}"


def fields_never_omitted(record: dict) -> set[tuple[str, str]]:
    """(op, field) for every optional config field (CONFIG_FIELDS, and every DPM-CONFIG keyword of
    dpm_scheduler) that no recorded call left out."""
    from conformance.strategies.scheduler import DEFAULT_CONFIG

    found = set()
    for (op, argument), (_, fields) in CONFIG_FIELDS.items():
        carried = [set(seen.split(",")) for seen in record.get(op, {}).get(argument, {}).get("fields", [])]
        found |= {(op, field) for field in fields if all(field in names for names in carried)}
    scheduler = record.get("dpm_scheduler", {})
    return found | {
        ("dpm_scheduler", key)
        for key in DEFAULT_CONFIG
        if "<omitted>" not in scheduler.get(key, {}).get("value", ["<omitted>"])
    }


def test_every_optional_config_field_is_left_out_somewhere(tmp_path_factory):
    """Each optional field of a config-reading op is missing from some call, and each is named in
    the clause that gives its default."""
    from conformance import spec_index

    clauses = spec_index.load_clauses()
    for (op, _), (clause_id, fields) in CONFIG_FIELDS.items():
        clause = clauses[clause_id]
        text = (spec_index.spec_dir() / clause.file).read_text().split(f"### {clause_id}:", 1)[1]
        text = text.split("\n### ", 1)[0]
        assert all(field in text for field in fields), (op, clause_id, fields)
    record = produced_once(tmp_path_factory, "opconform-argument-record", _record)
    assert not fields_never_omitted(record), (
        f"never left out (draw configs without them): {fields_never_omitted(record)}"
    )


def test_a_field_never_left_out_is_found():
    """A fake recording: a config that always carries use_sliding_window, a scheduler key always
    given; fields some call lacks, and scheduler keys never given, are not reported."""
    record = {
        "layer_windows": {"config": {"fields": ["layer_types,model_type,use_sliding_window",
                                                "max_window_layers,model_type,sliding_window_pattern,use_sliding_window"]}},
        "swiglu_limit": {"config": {"fields": ["swiglu_limits", "swiglu_limits_shared"]}},
        "moe_router_config": {"config": {"fields": ["model_type"]}},
        "rope_inv_freq": {"config": {"fields": ["max_position_embeddings,rope_scaling",
                                                "head_dim,original_max_position_embeddings,partial_rotary_factor,"
                                                "rope_parameters,rope_theta"]}},
        "rope_softmax_scale": {"config": {"fields": ["hidden_size,rope_scaling"]}},
        "dpm_scheduler": {"beta_start": {"value": ["<omitted>", "float:0.0001"]},
                          "solver_order": {"value": ["int:2"]}},
    }  # fmt: skip
    assert fields_never_omitted(record) == {
        ("layer_windows", "use_sliding_window"),
        ("dpm_scheduler", "solver_order"),
    }


def test_a_constant_argument_is_found():
    """A fake recording: a new op whose option is always one value, a tensor always float32 or
    always contiguous, and an op never called are each found; varied aspects are not."""
    record = {
        "new_op": {
            "x": {"value": ["tensor"], "dtype": ["torch.float32"], "layout": ["contiguous", "strided"]},
            "mode": {"value": ["str:'tanh'"]},
            "limit": {"value": ["<omitted>", "float:7.0"]},
        },
        "other_op": {
            "x": {"value": ["tensor"], "dtype": ["torch.bfloat16", "torch.float32"], "layout": ["contiguous"]}
        },  # fmt: skip
    }
    assert constant_aspects(record, ["new_op", "other_op", "never_op"]) == {
        ("new_op", "x", "dtype"),
        ("new_op", "mode", "value"),
        ("other_op", "x", "layout"),
        ("never_op", "*", "called"),
    }


def test_the_recording_names_arguments_as_the_protocol_does():
    """Positional and keyword calls record under the protocol's names; a defaulted argument left
    out records as omitted; a tensor records its dtype and layout."""
    import recording_backend as rec
    import torch

    rec.RECORD.clear()
    backend = rec.RecordingBackend()
    x = torch.randn(4, 6)
    backend.encoder_attention_mask(4)
    backend.encoder_attention_mask(4, sliding_window=2)
    backend.rms_norm(x[:, ::2], torch.ones(3), eps=1e-6)
    recorded = rec.RECORD
    assert recorded["encoder_attention_mask"]["sliding_window"]["value"] == {"<omitted>", "int:2"}
    assert recorded["encoder_attention_mask"]["seq_len"]["value"] == {"int:4"}
    assert recorded["rms_norm"]["x"]["layout"] == {"strided"} and recorded["rms_norm"]["weight"][
        "layout"
    ] == {"contiguous"}
    assert recorded["rms_norm"]["eps"]["value"] == {"float:1e-06"}
    rec.RECORD.clear()


def test_every_range_rule_is_met(tmp_path_factory):
    """The suite's draws meet every family's range rules (conformance/strategies/ranges)."""
    record = produced_once(tmp_path_factory, "opconform-argument-record", _record)[RANGES_KEY]
    missed = [f"{r.describe()}; seen {record.get(r.measure.op, {}).get(r.measure.name, [])[:12]}"
              for r in ranges.unmet(record, ranges.all_rules())]  # fmt: skip
    assert not missed, "draws miss a range (spec/README.md, Ranges):\n" + "\n".join(missed)


def without_region(rule: ranges.Rule, seen: list) -> list:
    """``seen`` without the values that meet ``rule`` (each value of a ``has`` rule)."""
    return [v for v in seen if v not in rule.values and not rule.met([v])]


def test_each_range_rule_fails_without_its_region(tmp_path_factory):
    """Every rule, on the suite's recording with its region taken out, is unmet: no rule holds
    whatever is drawn."""
    record = produced_once(tmp_path_factory, "opconform-argument-record", _record)[RANGES_KEY]
    for rule in ranges.all_rules():
        m = rule.measure
        seen = record.get(m.op, {})
        taken = {**record, m.op: {**seen, m.name: without_region(rule, seen.get(m.name, []))}}
        assert ranges.unmet(taken, [rule]) == [rule], rule.describe()


def test_an_unmet_range_rule_is_found():
    """A fake recording: a size never past its tile, no odd size, a threshold never at T + 1, no
    near-tie and a config form never drawn are each found; the met rules are not."""
    tokens = ranges.Measure("op", "tokens", ranges.dim("x", 0))
    offset = ranges.Measure("op", "offset", lambda a: None)
    gap = ranges.Measure("op", "gap", lambda a: None)
    form = ranges.Measure("other", "form", lambda a: None)
    rules = [ranges.past(tokens, 256, "tile"), ranges.odd(tokens), ranges.has(tokens, 96, why="Phi-3"),
             ranges.around(offset, "switch"), ranges.below(gap, 1.0, "ulp"),
             ranges.config_forms(form, "key without switch", why="rule 5")]  # fmt: skip
    record = {"op": {"tokens": [2, 96, 256], "offset": [-1, 0], "gap": [1.0, 3.5]}}
    assert ranges.unmet(record, rules) == [rules[0], rules[1], rules[3], rules[4], rules[5]]
    record = {"op": {"tokens": [3, 96, 257], "offset": [-1, 0, 1], "gap": [0.25]},
              "other": {"form": ["key without switch"]}}  # fmt: skip
    assert ranges.unmet(record, rules) == []


def test_every_family_states_its_ranges():
    """Each of the nine families has range rules, and its spec's Ranges section names every size
    a ``past`` rule reaches beyond."""
    from conformance import spec_index

    by_family = {
        f: importlib.import_module(f"conformance.strategies.ranges.{f}").RULES for f in ranges.FAMILIES
    }
    for family, rules in by_family.items():
        assert rules, family
        text = (spec_index.spec_dir() / f"{family}.md").read_text()
        assert "\n## Ranges\n" in text, family
        section = text.split("\n## Ranges\n", 1)[1].split("\n## ", 1)[0]
        for rule in rules:
            if rule.need == "past":
                assert str(rule.values[0]) in section, (family, rule.describe())


# Rule 3: every comparison with the oracle names the output's dtype (assert_close(dtype=...)), or the
# function checks it otherwise, or its clause names none. (module, function) -> where or why.
DTYPE_CHECKED_ELSEWHERE = {
    ("moe_checks", "judge_routing"): "call_routing checks the weights' dtype (float32 or the logits') first",
    ("moe_checks", "check_shared"): "check_output and the weights' dtype are checked just before",
    ("test_activations_clamped", "test_swiglu_oai_interleaved_is_deinterleaved_halves"): "metamorphic",
    ("test_attention", "compare"): "check_output(dtype=q's, device=q's) first",
    ("test_attention", "compare_nan"): "check_output(dtype=q's, device=q's) first",
    ("test_moe", "_same_by_id"): "metamorphic; call_routing checks each routing's dtype",
    ("test_norms", "test_output_dtype_and_float32_compute"): "dtype, shape and device checked just before",
    ("test_norms", "test_mixed_dtypes"): "each output's allowed dtypes checked just before",
    ("test_rope", "test_scores_depend_on_position_differences"): "float64 dot products and norms",
    ("test_rope", "_check_cos_sin"): "dtype checked just before",
    (
        "test_rope_config",
        "_compare_freq",
    ): "inv_freq's dtype checked just before; a config reader has no device",
    ("test_scheduler", "test_trajectory_matches_oracle"): "dtype and device checked just before",
    ("test_scheduler", "test_sde_third_order_matches_oracle"): "DPM-SDE3 names no dtype (DPM-TRAJ does)",
    ("test_scheduler", "test_timesteps_and_sigmas_match_oracle"): "sigmas: no dtype named; timesteps checked",
    ("test_scheduler", "check_construction"): "sigmas: no dtype named; timesteps checked; steps DPM-TRAJ's",
    ("test_scheduler", "test_signature_filtering_caller_works"): "DPM-SIGNATURE names no dtype",
    ("test_scheduler", "test_sde_noise_sources"): "DPM-NOISE compares noises; it names no dtype",
}


def comparisons_without_dtype(root) -> set[tuple[str, str]]:
    """(module, function) of every assert_close call under ``root`` (conformance/) without dtype=."""
    import ast

    found = set()
    for path in sorted(root.glob("*.py")):
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, ast.FunctionDef):
                continue
            for node in ast.walk(function):
                called = getattr(getattr(node, "func", None), "id", None)
                if called == "assert_close" and "dtype" not in {k.arg for k in node.keywords}:
                    found.add((path.stem, function.name))
    return found


def test_no_comparison_discards_a_named_dtype():
    """Rule 3: a comparison that does not name the output's dtype is listed with where it is checked."""
    found, listed = comparisons_without_dtype(REPO / "conformance"), set(DTYPE_CHECKED_ELSEWHERE)
    assert found == listed, (
        f"name the dtype (assert_close(dtype=...)) or list it: {sorted(found - listed)}; "
        f"no longer found: {sorted(listed - found)}"
    )


def test_a_comparison_without_dtype_is_found(tmp_path):
    """A fake module: an assert_close without dtype= is found, one with it is not."""
    (tmp_path / "test_fake.py").write_text(
        "def test_a(x):\n    assert_close(x, x, clause='C', context='')\n"
        "def test_b(x):\n    assert_close(x, x, clause='C', context='', dtype=x.dtype)\n"
    )
    assert comparisons_without_dtype(tmp_path) == {("test_fake", "test_a")}
