"""Model profiles (spec/models.md): each built-in against its config class and its sources' numbers,
the config.json round trip, the pins, the plugin's deselection, the results' model field, the
column per model in merge and the readiness table. In-process; the model mutant is killed through
the real entry point by tests/test_mutants.py (family ``rope``, which lists it)."""

from __future__ import annotations

import argparse
import json
import math

import pytest
from hypothesis import given, settings

from conformance import results
from conformance.models import builtin, configs
from conformance.strategies import common
from conformance.strategies.rope import rope_recipes
from mutants import _models as model_mutants
from opconform import readiness, render, report
from opconform.commands import run as run_command

# The numbers each built-in's spec section gives (spec/models.md), written out here, not derived:
# per op and layer kind, the fixed parameters the derivation must give and how many layers use them.
EXPECTED = {
    "step3p5": {
        ("paged_attention", "full_attention"): ({"num_heads": 64, "num_kv_heads": 8, "head_dim": 128,
                                                 "sliding_window": None, "scale": 128**-0.5}, 12),
        ("paged_attention", "sliding_attention"): ({"num_heads": 96, "num_kv_heads": 8, "head_dim": 128,
                                                    "sliding_window": 512, "scale": 128**-0.5}, 33),
        ("rotary_embedding", "full_attention"): ({"rotary_dim": 64, "rope_theta": 5e6,
                                                  "is_neox_style": True}, 12),
        ("rotary_embedding", "sliding_attention"): ({"rotary_dim": 128, "rope_theta": 1e4}, 33),
        ("gemma_rms_norm", "all"): ({"eps": 1e-5}, 45),
        ("select_experts", "moe"): ({"num_experts": 288, "top_k": 8, "scoring": "sigmoid",
                                     "renormalize": True, "uses_correction_bias": True}, 42),
    },
    "gemma2-2b": {
        ("paged_attention", "sliding_attention"): ({"num_heads": 8, "num_kv_heads": 4, "head_dim": 256,
                                                    "sliding_window": 4096, "softcap": 50.0,
                                                    "scale": 256**-0.5}, 13),
        ("paged_attention", "full_attention"): ({"sliding_window": None, "softcap": 50.0}, 13),
        ("gelu_and_mul", "dense"): ({"approximate": "tanh"}, 26),
        ("gemma_fused_add_rms_norm", "all"): ({"eps": 1e-6}, 26),
    },
    "gemma3-1b": {
        ("paged_attention", "sliding_attention"): ({"num_heads": 4, "num_kv_heads": 1, "head_dim": 256,
                                                    "sliding_window": 512, "softcap": None}, 22),
        ("rotary_embedding", "full_attention"): ({"rope_theta": 1e6, "rotary_dim": 256}, 4),
        ("rotary_embedding", "sliding_attention"): ({"rope_theta": 1e4}, 22),
    },
    "mistral-7b": {
        ("paged_attention", "sliding_attention"): ({"num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
                                                    "sliding_window": 4096}, 32),
        ("rms_norm", "all"): ({"eps": 1e-5}, 32),
        ("silu_and_mul", "dense"): ({}, 32),
    },
    "llama3.1-8b": {
        ("paged_attention", "full_attention"): ({"num_heads": 32, "num_kv_heads": 8, "head_dim": 128}, 32),
        ("rotary_embedding", "full_attention"): ({"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0,
                                                  "original_max_position_embeddings": 8192}, 32),
    },
    "qwen3-8b": {
        ("paged_attention", "full_attention"): ({"num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
                                                 "sliding_window": None}, 36),
        ("rotary_embedding", "full_attention"): ({"rope_theta": 1e6}, 36),
        ("rms_norm", "all"): ({"eps": 1e-6}, 36),
    },
    "qwen3-8b-w8a8": {
        ("paged_attention", "full_attention"): ({"num_heads": 32, "num_kv_heads": 8, "head_dim": 128}, 36),
        ("quant_scheme", "all"): ({"method": "w8a8-int8"}, 0),
        ("dynamic_int8_quant", "all"): ({}, 0),
        ("int8_scaled_mm", "qkv_proj"): ({"in_features": 4096, "out_features": 6144,
                                          "weight_scales": "channel", "activation_scales": "token"}, 36),
        ("int8_scaled_mm", "o_proj"): ({"in_features": 4096, "out_features": 4096}, 36),
        ("int8_scaled_mm", "gate_up_proj"): ({"in_features": 4096, "out_features": 24576}, 36),
        ("int8_scaled_mm", "down_proj"): ({"in_features": 12288, "out_features": 4096}, 36),
    },
    "qwen3-30b-a3b": {
        ("paged_attention", "full_attention"): ({"num_heads": 32, "num_kv_heads": 4, "head_dim": 128}, 48),
        ("select_experts", "moe"): ({"num_experts": 128, "top_k": 8, "scoring": "softmax",
                                     "renormalize": True}, 48),
    },
    "deepseek-v3": {
        ("paged_attention", "full_attention"): ({"num_heads": 128, "num_kv_heads": 128, "head_dim": 192,
                                                 "value_dim": 128,
                                                 "scale": 192**-0.5 * (0.1 * math.log(40) + 1) ** 2}, 61),
        ("rotary_embedding", "full_attention"): ({"rotary_dim": 64, "rope_type": "yarn", "factor": 40.0,
                                                  "is_neox_style": False}, 61),
        ("select_experts", "moe"): ({"num_experts": 256, "top_k": 8, "num_groups": 8, "topk_group": 4,
                                     "routed_scaling_factor": 2.5, "scoring": "sigmoid"}, 58),
        ("fused_moe", "moe"): ({"num_experts": 256, "top_k": 8, "hidden_size": 7168,
                                "intermediate_size": 2048, "drawn_hidden_size": 91,
                                "drawn_intermediate_size": 26, "activation": "silu"}, 58),
        ("append_shared_experts", "moe"): ({"shared_experts": 1, "routed_scaling_factor": 2.5}, 58),
        ("rope_kernel_args", "all"): ({"is_neox_style": False}, 0),
        ("quant_scheme", "all"): ({"method": "fp8"}, 0),
        ("fp8_group_quant", "all"): ({"group_size": 128, "fp8_dtype": "float8_e4m3fn",
                                      "use_ue8m0": False}, 0),
        ("fp8_block_scaled_mm", "q_a_proj"): ({"in_features": 7168, "out_features": 1536,
                                               "block_size": [128, 128], "fp8_dtype": "float8_e4m3fn"}, 61),
        ("fp8_block_scaled_mm", "kv_a_proj_with_mqa"): ({"in_features": 7168, "out_features": 576}, 61),
        ("fp8_block_scaled_mm", "kv_b_proj"): ({"in_features": 512, "out_features": 32768}, 61),
        ("fp8_block_scaled_mm", "o_proj"): ({"in_features": 16384, "out_features": 7168}, 61),
        ("fp8_block_scaled_mm", "down_proj"): ({"in_features": 18432, "out_features": 7168}, 3),
        ("fp8_block_scaled_mm", "experts.down_proj"): ({"in_features": 2048, "out_features": 7168}, 58),
    },
    "gpt-oss-20b": {
        ("paged_attention", "sliding_attention"): ({"num_heads": 64, "num_kv_heads": 8, "head_dim": 64,
                                                    "sliding_window": 128, "sinks": True}, 12),
        ("paged_attention", "full_attention"): ({"sliding_window": None, "sinks": True}, 12),
        ("rotary_embedding", "full_attention"): ({"rope_type": "yarn", "factor": 32.0,
                                                  "rope_theta": 150000.0}, 12),
        ("swiglu_oai_and_mul", "moe"): ({"alpha": 1.702, "limit": 7.0, "interleaved": True,
                                         "width": 2880}, 24),
        ("rope_cos_sin", "full_attention"): ({"rotary_dim": 64, "attention_factor": 0.1 * math.log(32) + 1,
                                              "max_position_embeddings": 131072}, 12),
        ("select_experts", "moe"): ({"num_experts": 32, "top_k": 4, "scoring": "topk_softmax"}, 24),
    },
    "qwen2-vl-7b": {
        ("paged_attention", "full_attention"): ({"num_heads": 28, "num_kv_heads": 4, "head_dim": 128}, 28),
        ("mrope", "full_attention"): ({"mrope_section": [16, 24, 24], "mrope_interleaved": False,
                                       "rope_theta": 1e6}, 28),
    },
    "sana": {
        ("gelu_and_mul", "dense"): ({"approximate": "tanh"}, 26),
        ("dpm_scheduler", "scheduler"): ({"flow_shift": 3.0, "use_flow_sigmas": True,
                                          "prediction_type": "flow_prediction",
                                          "algorithm_type": "dpmsolver++", "solver_order": 2}, 0),
    },
}  # fmt: skip


def _use(derived, op, kind):
    found = [u for u in derived.uses if u.op == op and u.kind == kind]
    assert len(found) == 1, (derived.name, op, kind, [(u.op, u.kind) for u in derived.uses])
    return found[0]


def test_every_builtin_has_its_expected_numbers():
    """Every built-in is listed here with the numbers its spec section gives."""
    assert set(EXPECTED) == set(builtin.BUILTIN)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_builtin_derives_its_published_numbers(name):
    """The config class built from the profile's fields gives, through the family readers, the
    numbers of the model's sources (spec/models.md, MODEL-PROFILE)."""
    derived = configs.by_name(name)
    for (op, kind), (params, layers) in EXPECTED[name].items():
        use = _use(derived, op, kind)
        for key, value in params.items():
            got = use.params[key]
            assert got == pytest.approx(value) if isinstance(value, float) else got == value, (
                name,
                op,
                key,
                got,
            )
        assert len(use.layers) == layers, (name, op, kind, use.layers)


@pytest.mark.parametrize("name", sorted(set(builtin.BUILTIN) - {"sana"}))
def test_config_json_from_the_class_gives_the_same_profile(name, tmp_path):
    """--opconform-model-config on a config.json written from the class (config.to_json_file) gives
    the built-in's profile (spec/models.md, MODEL-PROFILE)."""
    profile = builtin.BUILTIN[name]
    path = tmp_path / "config.json"
    configs.build(profile).to_json_file(str(path))
    assert configs.comparable(configs.from_file(path)) == configs.comparable(configs.by_name(name))


def test_step3p5_fields_match_the_class_attributes():
    """The class keeps the profile's Step-3.5 numbers: 45 layers after the 3 MTP entries are split
    off, 8 kv heads (num_attention_groups), 288 experts (moe_num_experts), window 512."""
    config = configs.build(builtin.STEP3P5)
    assert (config.num_hidden_layers, len(config.layer_types), config.num_key_value_heads) == (45, 45, 8)
    assert (config.n_routed_experts, config.num_experts_per_tok, config.sliding_window) == (288, 8, 512)
    assert config.rope_parameters["full_attention"]["partial_rotary_factor"] == 0.5


@pytest.mark.parametrize(
    "path_text, message",
    [(None, "no such config file"), ("{", "not a JSON config"), ('{"a": 1}', "no 'model_type'"),
     ('{"model_type": "no-such-model"}', "not a transformers config class"),
     ('{"model_type": "llama", "num_attention_heads": 0}', "cannot derive a profile from it: ZeroDivision"),
     ('{"model_type": "llama", "hidden_size": "abc"}', "cannot derive a profile from it: .*'hidden_size'")],
)  # fmt: skip
def test_bad_model_config_is_one_line(tmp_path, path_text, message):
    """Each unusable config is one ModelError line (0 heads and transformers' own validators raised
    their own exceptions, a traceback at the start of the profile run)."""
    path = tmp_path / "config.json"
    if path_text is not None:
        path.write_text(path_text)
    with pytest.raises(configs.ModelError, match=message) as raised:
        configs.from_file(path)
    assert "\n" not in str(raised.value)


def test_unknown_model_names_the_builtins():
    with pytest.raises(configs.ModelError, match=r"unknown model 'nope'; built-in models: \["):
        configs.by_name("nope")


def test_unpinned_strategies_are_the_generic_objects():
    """Without a profile, pinned() returns its default itself (nothing changes in a normal run)."""
    default = object()
    assert common.pinned("rope.layer", default) is default


@given(recipe=rope_recipes())
@settings(max_examples=40, database=None)
def test_generic_rope_draws_never_reach_rotary_dim_64(recipe):
    """Why the model mutant needs its profile: the generic rope draws never take rotary_dim 64
    (they reach past it, spec/rope.md Ranges, but not that width)."""
    assert recipe.rotary_dim != model_mutants.TILE


def test_pinned_rope_draws_are_the_models_layer_kinds():
    """Under step3p5's pins every rope recipe is one of its two layer kinds (MODEL-RUN)."""
    kinds = set(configs.by_name("step3p5").pins["rope.layer"])
    common.pin_model({"rope.layer": tuple(kinds)})
    try:
        seen = set()

        @given(recipe=rope_recipes())
        @settings(max_examples=30, database=None)
        def draw(recipe):
            seen.add((recipe.rotary_dim, recipe.head_dim, recipe.q_heads, recipe.k_heads))

        draw()
    finally:
        common.pin_model({})
    assert seen == kinds


def _case(nodeid, outcome, *, op, model=None, clauses=("ROPE-APPLY",)):
    data = {"nodeid": nodeid, "outcome": outcome, "backend": "acme", "device": "cpu", "op": op,
            "clauses": list(clauses)}  # fmt: skip
    return {**data, **({"model": model} if model else {})}


def _document(cases, models=None):
    data = {"schema": results.SCHEMA, "version": results.VERSION, "results": cases, "backends": ["acme"]}
    return results.Document.from_dict({**data, **({"models": models} if models else {})}).to_dict()


MODELS = {"m": {"title": "M", "ops": [
    {"op": "rotary_embedding", "kind": "full", "params": {"rotary_dim": 64}, "layers": [0, 1, 2, 5]},
    {"op": "rms_norm", "kind": "all", "params": {"eps": 1e-6}, "layers": [0, 1]},
    {"op": "paged_attention", "kind": "full", "params": {}, "layers": [0]},
    {"op": "layer_windows", "kind": "all", "params": {}, "layers": []}]}}  # fmt: skip


def test_results_carry_the_model_and_old_documents_load():
    """MODEL-REPORT: the case's model and the models table survive a load; a document without them
    still loads; a bad table is one ResultsError line."""
    doc = _document([_case("t::a", "passed", op="rotary_embedding", model="m")], MODELS)
    assert doc["models"] == MODELS and doc["results"][0]["model"] == "m"
    assert "models" not in _document([_case("t::a", "passed", op="rotary_embedding")])
    with pytest.raises(
        results.ResultsError, match="field 'models': 'm': expected an object with an 'ops' list"
    ):
        _document([], {"m": {"ops": 3}})
    with pytest.raises(results.ResultsError, match="field 'model': expected a string"):
        _document([_case("t::a", "passed", op="x", model=3)])


def test_merge_keeps_the_generic_and_the_profile_case_apart():
    """The same node id run generically and at a model's parameters is two cases, two columns."""
    generic = _document([_case("t::a", "passed", op="rotary_embedding")])
    profile = _document([_case("t::a", "failed", op="rotary_embedding", model="m")], MODELS)
    merged = report.merge([generic, profile], names=["generic", "m"])
    assert len(merged["results"]) == 2 and not merged["warnings"]
    assert report.build_matrix(merged).columns == ["acme@cpu", "acme@cpu [m]"]
    assert merged["models"] == MODELS


def test_readiness_rows():
    """MODEL-READINESS: implemented, verdict (worst MUST case; SHOULD failures beside it) and layers
    per op; n/i and no case."""
    doc = _document([
        _case("t::a", "passed", op="rotary_embedding", model="m"),
        _case("t::b", "failed", op="rotary_embedding", model="m"),
        _case("t::c", "not implemented", op="rms_norm", model="m", clauses=("NORM-RMS",)),
        _case("t::d", "passed", op="paged_attention", model="m", clauses=("SERVE",)),
        _case("t::e", "failed (SHOULD)", op="paged_attention", model="m", clauses=("SERVE-ERRORS",)),
    ], MODELS)  # fmt: skip
    ((model, title, column, rows),) = readiness.tables(doc)
    assert (model, title, column) == ("m", "M", "acme@cpu")
    got = {r["op"]: (r["implemented"], r["verdict"], r["layers"]) for r in rows}
    assert got == {
        "rotary_embedding": ("yes", "fail", "0-2,5"),
        "rms_norm": ("n/i", "n/i", "0-1"),
        "paged_attention": ("yes", "pass (1 SHOULD failed)", "0"),  # counted beside, not as, the verdict
        "layer_windows": ("no case", "no case", "-"),
    }
    text = render.text(doc)
    assert "readiness of acme@cpu for model m (M):" in text and "rotary_dim=64" in text
    assert "## Readiness: m (M) on acme@cpu" in render.markdown(doc)
    assert "Readiness: m (M) on acme@cpu" in render.html_page(doc)


def test_run_model_runs_generic_then_profile_and_merges(tmp_path, monkeypatch, capsys):
    """opconform run --model: the generic run, then the profile run with --opconform-model, merged
    into one report whose text has the readiness table and both columns (pytest itself faked)."""
    commands = []

    def fake_run_pytest(command):
        commands.append(command)
        path = next(a.split("=", 1)[1] for a in command if a.startswith("--opconform-json="))
        model = next((a.split("=", 1)[1] for a in command if a.startswith("--opconform-model=")), None)
        case = _case("t::a", "passed", op="rotary_embedding", model=model)
        (tmp_path / path).write_text(json.dumps(_document([case], MODELS if model else None)))
        return 0, type("Relay", (), {"finish": lambda self, **_: None})()

    monkeypatch.setattr(run_command, "run_pytest", fake_run_pytest)
    monkeypatch.setattr(run_command, "model_problem", lambda args: None)  # "m" is this test's model
    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    args = parser.parse_args(["--model", "m", "--out", str(tmp_path / "out"), "--backend", "acme"])
    assert run_command.run(args) == 0
    assert [any(a == "--opconform-model=m" for a in c) for c in commands] == [False, True]
    out = capsys.readouterr().out
    assert "readiness of acme@cpu for model m (M):" in out and "acme@cpu [m]" in out
    merged = report.load(tmp_path / "out" / "report.json")
    assert {r.get("model") for r in merged["results"]} == {None, "m"}


def test_run_model_option_errors(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    for argv, message in (
        (["--model-only"], "--model-only needs --model or --model-config"),
        (["--model", "a", "--model-config", "b"], "--model and --model-config: give one of them"),
        (["--model-config", str(tmp_path / "none.json")], "no such file"),
    ):
        assert run_command.run(parser.parse_args([*argv, "--out", str(tmp_path)])) == 2
        assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, words",
    [(["--model", "nosuch"], "--model: unknown model 'nosuch'; built-in models: ["),
     (["--model-config", "{"], "--model-config: {CONFIG}: not a JSON config"),
     (["--model-config", '{"model_type": "no-such-model"}'], "model_type 'no-such-model' is not a"),
     (["--model-config", '{"model_type": "llama", "num_attention_heads": 0}'],
      "--model-config: {CONFIG}: cannot derive a profile from it: ZeroDivisionError")],
)  # fmt: skip
def test_run_refuses_a_bad_model_before_any_run(argv, words, tmp_path, monkeypatch, capsys):
    """An unknown --model or an unusable --model-config was refused by the profile run's pytest,
    after the whole generic run: now one line, exit 2, and no pytest started."""
    started = []
    monkeypatch.setattr(run_command, "run_pytest", lambda command: started.append(command))
    config = tmp_path / "config.json"
    if argv[0] == "--model-config":
        config.write_text(argv[1])
        argv = [argv[0], str(config)]
    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    assert run_command.run(parser.parse_args([*argv, "--out", str(tmp_path / "out")])) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("opconform run: error: ") and words.format(CONFIG=config) in line, line
    assert started == []


def test_step_config_with_limit_lists_pins_each_layers_limit(tmp_path):
    """A Step-3.5 config.json with its limit lists: each layer's limit by ACT-LIMIT-CONFIG (0 -> no
    clamp), routed and shared apart, and the clamp's strategy pinned to those values."""
    fields = {**builtin.STEP3P5.config, "swiglu_limits": [0.0] * 3 + [7.0] * 42,
              "swiglu_limits_shared": [0.0] * 3 + [16.0] * 42}  # fmt: skip
    path = tmp_path / "config.json"
    configs.config_class(builtin.STEP3P5.config_class)(**fields).to_json_file(str(path))
    derived = configs.from_file(path)
    limits = {
        (u.kind, u.params["limit"], len(u.layers)) for u in derived.uses if u.op == "swiglu_step_and_mul"
    }
    assert limits == {("dense", None, 3), ("moe-routed", 7.0, 42), ("moe-shared", 16.0, 42)}
    assert set(derived.pins["activation.limit"]) == {None, 7.0, 16.0}


def test_a_backend_declaring_its_model_is_drawn_at_that_profile():
    """MODEL-BACKEND: around a case of a backend with ``opconform_model``, the pins are that model's;
    the run's own (none here) are back afterwards, and other backends' cases are left alone."""
    from types import SimpleNamespace

    from conformance.harness import model_profile

    def item(backend):
        return SimpleNamespace(callspec=SimpleNamespace(params={"backend": backend}))

    hook = model_profile.BackendPins().pytest_runtest_call
    inside = hook(item(model_mutants.BACKENDS[0]))
    next(inside)
    assert set(common.pinned_values("rope.layer")) == set(configs.by_name("step3p5").pins["rope.layer"])
    with pytest.raises(StopIteration):
        inside.send(None)
    assert common.pinned_table() == {}
    plain = hook(item(SimpleNamespace(name="plain")))
    next(plain)
    assert common.pinned_table() == {}
    with pytest.raises(StopIteration):
        plain.send(None)


def test_a_backend_declaring_an_unknown_model_is_a_usage_error():
    from types import SimpleNamespace

    from conformance.harness import model_profile

    backend = SimpleNamespace(name="acme", opconform_model="nope")
    with pytest.raises(
        pytest.UsageError, match=r"backend\(s\) \['acme'\]: opconform_model names no built-in model"
    ):
        model_profile.activate(SimpleNamespace(), [backend])
