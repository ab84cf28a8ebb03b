"""A model profile pins every op of each family it uses (spec/models.md, MODEL-FAMILIES).

For each built-in profile: the families it uses are those of its ops (``backends.protocols.OPS``),
and every op those families' protocols declare is either called by the model (a use) or named
unused with a reason. Every op it calls is pinned: one of its properties that the profile run keeps,
run once in-process under the profile's pins (one example drawn; the backend a stub that stops the
case at its first op call), reads a pin the profile says that op's properties draw (``pinned_by``);
an op without such pins is pinned by a kept property parametrized over a parameter the model's uses
of the op fix (npu_geglu_args' ``approximate``: the profile run keeps the model's value only).
"""

from __future__ import annotations

import functools
import importlib
import itertools
import pkgutil
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings

import conformance
from backends.protocols import FAMILIES, OPS, protocol_ops
from conformance.harness import model_profile
from conformance.models import builtin, configs
from conformance.strategies import common

PROBE = settings(max_examples=1, database=None, deadline=None, derandomize=True, phases=[Phase.generate],
                 suppress_health_check=list(HealthCheck))  # fmt: skip


class _Stop(Exception):
    """The stub backend's answer to any op: the case has drawn its inputs, nothing more is needed."""


class StubBackend:
    name = "pin-probe"

    def unavailable(self, device):
        return None

    def __getattr__(self, op):
        if op.startswith("__"):
            raise AttributeError(op)

        def stop(*args, **kwargs):
            raise _Stop(op)

        return stop


class _Reads(dict):
    """The pins, noting every key read that had values."""

    def __init__(self, pins):
        super().__init__(pins)
        self.read: set[str] = set()

    def get(self, key, default=None):
        value = super().get(key, default)
        if value:
            self.read.add(key)
        return value


@functools.cache
def properties() -> list[SimpleNamespace]:
    """Every case shape of the suite's properties: the function, its marks (function and parameter
    set) and parameters, one entry per combination of its parametrize marks."""
    found = []
    for info in pkgutil.iter_modules(conformance.__path__):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"conformance.{info.name}")
        for name, fn in vars(module).items():
            if (
                not name.startswith("test_")
                or not callable(fn)
                or getattr(fn, "__module__", "") != module.__name__
            ):
                continue
            marks = list(getattr(fn, "pytestmark", []))
            axes = []
            for mark in (m for m in marks if m.name == "parametrize"):
                names = mark.args[0].split(",") if isinstance(mark.args[0], str) else list(mark.args[0])
                names = [n.strip() for n in names]
                axes.append([_param_set(names, value) for value in mark.args[1]])
            for combination in itertools.product(*axes):
                params = {k: v for p, _ in combination for k, v in p.items()}
                own = [m for m in marks if m.name != "parametrize"] + [m for _, ms in combination for m in ms]
                found.append(
                    SimpleNamespace(fn=fn, marks=own, params=params, id=f"{module.__name__}::{name}")
                )
    return found


def _param_set(names, value):
    marks = list(getattr(value, "marks", ()))
    values = value.values if hasattr(value, "marks") else (value if len(names) > 1 else (value,))
    return dict(zip(names, values, strict=True)), marks


class _Item:
    """What ``model_profile.unused_reason`` reads of a pytest item."""

    def __init__(self, entry):
        self.marks, self.callspec = entry.marks, SimpleNamespace(params=entry.params)

    def get_closest_marker(self, name):
        return next((m for m in self.marks if m.name == name), None)

    def iter_markers(self, name):
        return (m for m in self.marks if m.name == name)


def pins_read(entry, pins: dict, *, body: bool) -> set[str]:
    """The pin keys ``entry`` reads with values under ``pins``: drawing one example, and with ``body``
    running the case on it too (up to the stub's first op call)."""
    reads = _Reads(pins)
    saved, common._PINNED = common._PINNED, reads
    fixed = {"backend": StubBackend(), "device": torch.device("cpu"), **entry.params}
    try:
        if hasattr(entry.fn, "hypothesis"):
            inner = entry.fn.hypothesis.inner_test

            def run(**drawn):
                if body:
                    _quietly(inner, **fixed, **drawn)

            PROBE(given(**entry.fn.hypothesis._given_kwargs)(run))()
        elif body:
            _quietly(entry.fn, **fixed)
    finally:
        common._PINNED = saved
    return reads.read


def _quietly(fn, **kwargs) -> None:
    try:
        fn(**kwargs)
    except (Exception, pytest.skip.Exception, pytest.fail.Exception):  # the stub stops every case
        pass


def unaccounted_ops(derived) -> list[str]:
    """The ops of a family the profile uses that it neither calls nor names unused."""
    families = {OPS[op] for op in derived.ops}
    declared = [op for family in sorted(families) for op in protocol_ops(FAMILIES[family])]
    return [op for op in declared if op not in derived.ops and op not in derived.unused_ops]


def _op_of(entry) -> str | None:
    mark = _Item(entry).get_closest_marker("op")
    return mark.args[0] if mark is not None else None


def unpinned_ops(derived) -> list[str]:
    """The ops the profile calls that no property its run keeps draws at the pins ``pinned_by`` names
    for the op (an op with none: no kept property parametrized over a parameter its uses fix).
    Draws are tried first, bodies only then (they build the inputs: the slow part)."""
    missing = []
    for op in derived.ops:
        entries = [
            e
            for e in properties()
            if _op_of(e) == op and model_profile.unused_reason(_Item(e), derived) is None
        ]
        keys = set(derived.pinned_by.get(op, ()))
        if not keys:
            fixed = {key for use in derived.uses if use.op == op for key in use.params}
            if not any(fixed & set(e.params) for e in entries):
                missing.append(op)
            continue
        if not any(keys & pins_read(e, derived.pins, body=body) for body in (False, True) for e in entries):
            missing.append(op)
    return missing


@pytest.mark.parametrize("name", sorted(builtin.BUILTIN))
def test_every_op_of_a_used_family_is_called_or_named_unused(name):
    """Each op of the protocols of the families the model uses: a use, or unused with its reason."""
    derived = configs.by_name(name)
    assert not unaccounted_ops(derived), f"{name}: give these ops a use or an unused reason (families.UNUSED)"
    assert not set(derived.ops) & set(derived.unused_ops)


@pytest.mark.parametrize("name", sorted(builtin.BUILTIN))
def test_every_op_a_model_calls_is_drawn_at_its_pins(name):
    """Some property of each op the model calls, kept by its profile run, draws that op's pins."""
    assert unpinned_ops(configs.by_name(name)) == []


def test_an_unpinned_op_and_an_unaccounted_one_are_found():
    """A profile without its fused-expert pin, or without one unused op's reason, is reported."""
    derived = configs.by_name("qwen3-30b-a3b")
    del derived.pins["moe.fused"]
    del derived.unused_ops["append_shared_experts"]
    assert unpinned_ops(derived) == ["fused_moe"]
    assert unaccounted_ops(derived) == ["append_shared_experts"]


def _drawn(strategy, pins: dict, count: int = 20) -> list:
    seen = []
    saved = common.pinned_table()
    common.pin_model(pins)
    try:

        @settings(PROBE, max_examples=count)
        @given(value=strategy)
        def draw(value):
            seen.append(value)

        draw()
    finally:
        common.pin_model(saved)
    return seen


@pytest.mark.parametrize("name", ["step3p5", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b"])
def test_fused_draws_are_the_models_experts_scaled(name):
    """MODEL-MOE: E and k the model's, H and I scaled by one factor (I/H exact) into the budget."""
    from conformance.models.families import EXPERT_WEIGHTS_BUDGET
    from conformance.strategies.moe_fused import fused_recipes

    derived = configs.by_name(name)
    (use,) = {str(u.params): u for u in derived.uses if u.op == "fused_moe"}.values()
    p = use.params
    for recipe in _drawn(fused_recipes(), derived.pins):
        assert (recipe.experts, recipe.top_k) == (p["num_experts"], p["top_k"])
        assert recipe.inter * p["hidden_size"] == recipe.hidden * p["intermediate_size"]
        assert 3 * recipe.experts * recipe.hidden * recipe.inter <= EXPERT_WEIGHTS_BUDGET
        assert recipe.activation == p["activation"] and not recipe.on_input
    generic = _drawn(fused_recipes(), {})  # for contrast: without pins the draws vary
    assert len({(r.experts, r.top_k, r.hidden) for r in generic}) > 1


def test_rope_draws_take_the_models_frequencies_and_config():
    """MODEL-ROPE: gpt-oss's YaRN rows (attention factor 1 + 0.1 ln 32) in the cache and cos/sin
    rows, its own config at its lengths in the frequency properties; nothing drawn unpinned."""
    from conformance.strategies.model_pins import cos_sin_rows
    from conformance.strategies.rope import rope_configs, rope_recipes
    from reference import rope as oracle

    derived = configs.by_name("gpt-oss-20b")
    config = dict(derived.pins["model.config"])["gpt-oss-20b"]
    inv, factor = oracle.rope_inv_freq(config, seq_len=None, layer_type=None)
    for recipe in _drawn(rope_recipes(), derived.pins, count=5):
        positions, _, _, cache = recipe.make()
        want = oracle.rope_cos_sin(torch.arange(cache.shape[0]), inv.float(), attention_factor=factor)
        assert torch.equal(cache, want.to(cache.dtype)), recipe
    for rows in _drawn(cos_sin_rows(), derived.pins, count=5):
        assert rows.attention_factor == factor and max(rows.positions) < 131072
    for drawn, seq_len, layer_type in _drawn(rope_configs(), derived.pins, count=5):
        assert type(drawn) is type(config) and drawn.to_dict() == config.to_dict() and drawn is not config
        assert seq_len in (None, 1, 4095, 4096, 4097, 131071, 131072, 131073, 524288) and layer_type is None
    assert set(_drawn(cos_sin_rows(), {}, count=3)) == {None}


def test_pinned_draw_unpinned_draws_as_its_default():
    """pinned_draw adds no choice of its own: unpinned, the same examples as its default strategy."""
    from hypothesis import strategies as st

    default = st.tuples(st.integers(0, 10**6), st.sampled_from("abc"))
    assert _drawn(common.pinned_draw("nothing.pinned", default), {}) == _drawn(default, {})
    assert set(_drawn(common.pinned_draw("k", default), {"k": ((1, "z"),)}, count=3)) == {(1, "z")}


def test_a_case_at_another_value_of_a_fixed_parameter_is_deselected():
    """MODEL-FAMILIES: Gemma2's GELU is tanh, so npu_geglu_args' "none" case is not its."""
    derived = configs.by_name("gemma2-2b")

    def item(approximate):
        entry = SimpleNamespace(
            marks=[pytest.mark.op("npu_geglu_args").mark], params={"approximate": approximate}
        )
        return _Item(entry)

    assert model_profile.unused_reason(item("tanh"), derived) is None
    assert "its approximate is tanh" in model_profile.unused_reason(item("none"), derived)


def test_expert_sizes_scale_by_one_factor_within_the_budget():
    """MODEL-MOE: the spec's examples; a model already within the budget keeps its own sizes."""
    from conformance.models.families import scaled_expert_sizes

    assert scaled_expert_sizes(4096, 1280, 288) == (80, 25)
    assert scaled_expert_sizes(7168, 2048, 256) == (91, 26)
    assert scaled_expert_sizes(2048, 768, 128) == (120, 45)
    assert scaled_expert_sizes(2880, 2880, 32) == (147, 147)
    assert scaled_expert_sizes(16, 8, 4) == (16, 8)


def test_quant_draws_are_the_models_linear_layers():
    """MODEL-QUANT: under DeepSeek-V3's pins the fp8 draws are its e4m3fn 128 x 128 blocks at one of
    its layers' K (N cut to whole blocks and its partial one); under the W8A8 Qwen3's the int8 draws
    are at its K, per-token and per-channel; unpinned the recipes are the generic ones."""
    from hypothesis import strategies as st

    from conformance.strategies import quant, quant_pins

    deepseek = configs.by_name("deepseek-v3")
    shapes = deepseek.pins["quant.linear"]
    for r in _drawn(quant.block_mm_inputs(), deepseek.pins):
        assert (r.fp8_dtype, r.block_size, r.m in quant_pins.ROWS) == (torch.float8_e4m3fn, (128, 128), True)
        assert any(r.k == k and r.n == quant_pins.block_columns(n, 128) for k, n in shapes), r
    assert quant_pins.block_columns(384, 128) == 384 and quant_pins.block_columns(36864, 128) == 256
    assert quant_pins.block_columns(576, 128) == 320  # kv_a_proj's partial block (512 + 64) is kept
    for r in _drawn(quant.group_inputs(), deepseek.pins):
        assert (r.group_size, r.fp8_dtype, r.use_ue8m0) == (128, torch.float8_e4m3fn, False)
        assert r.groups * 128 in {k for k, _ in shapes}
    qwen = configs.by_name("qwen3-8b-w8a8")
    for r in _drawn(quant.int8_mm_inputs(), qwen.pins):
        m, k, n = r.shape
        assert k in {k for k, _ in qwen.pins["quant.linear"]} and not (r.per_tensor_a or r.per_tensor_b)
        assert m in quant_pins.ROWS and n == quant_pins.INT8_COLUMNS
    assert {r.shape[1] for r in _drawn(quant.int8_quant_inputs(), qwen.pins)} <= {4096, 12288}
    default = st.builds(quant.BlockMmRecipe, st.sampled_from((1, 2)), st.just(5), st.just(7),
                        st.just(torch.float8_e4m3fn), st.just(torch.float32), st.integers(0, 99))  # fmt: skip
    assert _drawn(quant_pins.at_model(default, quant_pins.block_mm), {}) == _drawn(default, {})
