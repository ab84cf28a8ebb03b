"""SERVE-LAYER-WINDOWS (spec/serving.md): the oracle's and native's ``layer_windows`` against
transformers' own configs, the legacy rules (no ``layer_types``) against what each config's
``__post_init__`` computes, and the bad-config errors."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest

from backends import native
from reference import serving

IMPLS = {"oracle": serving.layer_windows, "native": native.BACKEND.layer_windows}
LAYERS = (1, 6, 13, 30)

# (transformers config class, its kwargs, the legacy fields a config.json without layer_types holds)
HF_CASES = {
    "gemma2": ("Gemma2Config", dict(sliding_window=8), {}),
    "gemma3-pattern3": ("Gemma3TextConfig", dict(sliding_window=8, sliding_window_pattern=3),
                        {"sliding_window_pattern": 3}),
    "gemma3-default": ("Gemma3TextConfig", dict(sliding_window=8), {}),
    "gpt_oss": ("GptOssConfig", dict(sliding_window=16), {}),
    "cohere2-pattern2": ("Cohere2Config", dict(sliding_window=8, sliding_window_pattern=2),
                         {"sliding_window_pattern": 2}),
    "cohere2-default": ("Cohere2Config", dict(sliding_window=8), {}),
    "mistral": ("MistralConfig", dict(sliding_window=8), {}),
    "mistral-full": ("MistralConfig", dict(sliding_window=None), {}),
    "qwen2": ("Qwen2Config", dict(use_sliding_window=True, sliding_window=8, max_window_layers=3),
              {"use_sliding_window": True, "max_window_layers": 3}),
    "qwen2-default": ("Qwen2Config", dict(use_sliding_window=True, sliding_window=8),
                      {"use_sliding_window": True}),
    "qwen2-off": ("Qwen2Config", dict(use_sliding_window=False, sliding_window=8, max_window_layers=1),
                  {"use_sliding_window": False, "max_window_layers": 1}),
    "qwen3": ("Qwen3Config", dict(use_sliding_window=True, sliding_window=4, max_window_layers=5),
              {"use_sliding_window": True, "max_window_layers": 5}),
    "qwen2_moe": ("Qwen2MoeConfig", dict(use_sliding_window=True, sliding_window=8, max_window_layers=4),
                  {"use_sliding_window": True, "max_window_layers": 4}),
}  # fmt: skip


def _hf_config(name: str, layers: int):
    """The transformers config of HF_CASES[name] with ``layers`` layers, and the legacy fields."""
    transformers = pytest.importorskip("transformers", reason="transformers (the 'peers' extra) absent")
    cls_name, kwargs, legacy = HF_CASES[name]
    return getattr(transformers, cls_name)(num_hidden_layers=layers, **kwargs), legacy


def _transformers_windows(config) -> list[int | None]:
    """The window transformers gives each layer: ``config.sliding_window`` where ``layer_types``
    says sliding (every ``*Attention.__init__`` of these models); Mistral has no layer_types and
    passes ``config.sliding_window`` to every layer (modeling_mistral.MistralAttention.forward)."""
    kinds = getattr(config, "layer_types", None)
    if kinds is None:
        return [config.sliding_window] * config.num_hidden_layers
    return [config.sliding_window if kind == "sliding_attention" else None for kind in kinds]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("layers", LAYERS)
@pytest.mark.parametrize("name", HF_CASES)
def test_layer_windows_on_transformers_configs(impl, layers, name):
    """SERVE-LAYER-WINDOWS with transformers' own config objects (layer_types filled by transformers)."""
    config, _ = _hf_config(name, layers)
    assert IMPLS[impl](config) == _transformers_windows(config)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("layers", LAYERS)
@pytest.mark.parametrize("name", HF_CASES)
def test_legacy_rules_match_transformers(impl, layers, name):
    """SERVE-LAYER-WINDOWS without layer_types: a plain config with the raw fields gives what
    transformers' config computes from them (a config.json written before layer_types existed)."""
    config, legacy = _hf_config(name, layers)
    raw_window = HF_CASES[name][1]["sliding_window"]  # before Qwen's use_sliding_window=False clears it
    plain = SimpleNamespace(model_type=config.model_type, num_hidden_layers=layers, sliding_window=raw_window,
                            **legacy)  # fmt: skip
    assert IMPLS[impl](plain) == _transformers_windows(config)


@pytest.mark.parametrize(
    "module, cls_name, config_kwargs",
    [
        ("gemma2", "Gemma2", dict(sliding_window=8, head_dim=8)),
        ("qwen2", "Qwen2", dict(use_sliding_window=True, sliding_window=8, max_window_layers=2)),
        ("qwen2", "Qwen2", dict(sliding_window=8, max_window_layers=2)),  # the switch's default: off
        ("cohere2", "Cohere2", dict(sliding_window=8)),
    ],
)
def test_transformers_attention_layers_use_these_windows(module, cls_name, config_kwargs):
    """The attention modules transformers builds from a config carry the windows layer_windows returns."""
    transformers = pytest.importorskip("transformers", reason="transformers (the 'peers' extra) absent")
    modeling = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    config = getattr(transformers, f"{cls_name}Config")(
        num_hidden_layers=5, hidden_size=16, num_attention_heads=2, num_key_value_heads=1, **config_kwargs
    )
    built = [getattr(modeling, f"{cls_name}Attention")(config, i).sliding_window for i in range(5)]
    assert serving.layer_windows(config) == built


LITERAL = [
    # Written from the spec text: Gemma2 slides the EVEN layers; gemma3/cohere2 all but every pattern-th.
    (dict(model_type="gemma2", sliding_window=4), 4, [4, None, 4, None]),
    (dict(model_type="gpt_oss", sliding_window=4), 3, [4, None, 4]),
    (dict(model_type="gemma3_text", sliding_window=2, sliding_window_pattern=3), 6,
     [2, 2, None, 2, 2, None]),
    (dict(model_type="cohere2", sliding_window=5), 5, [5, 5, 5, None, 5]),
    (dict(model_type="qwen2", sliding_window=3, use_sliding_window=True, max_window_layers=2), 4,
     [None, None, 3, 3]),
    (dict(model_type="qwen2_moe", sliding_window=3, use_sliding_window=True, max_window_layers=3), 5,
     [3, None, 3, None, None]),
    # Qwen's switch defaults to False (Qwen2Config, Qwen2MoeConfig, Qwen3Config, Qwen3MoeConfig).
    (dict(model_type="qwen2", sliding_window=3, max_window_layers=0), 2, [None, None]),
    (dict(model_type="qwen2_moe", sliding_window=3, max_window_layers=3), 3, [None, None, None]),
    (dict(model_type="qwen3_moe", sliding_window=3), 2, [None, None]),
    (dict(model_type="qwen3_moe", sliding_window=3, use_sliding_window=True), 2, [3, 3]),
    (dict(model_type="qwen2", sliding_window=3, use_sliding_window=None, max_window_layers=0), 2,
     [None, None]),
    (dict(model_type="cohere2", sliding_window=4096), 4, [4096, 4096, 4096, None]),  # the oracle's W
    (dict(model_type="mistral", sliding_window=7), 2, [7, 7]),
    (dict(model_type="some_new_model", sliding_window=7), 2, [7, 7]),
    (dict(model_type="gemma2", sliding_window=None), 3, [None, None, None]),
    (dict(model_type="qwen3", sliding_window=3, use_sliding_window=False, max_window_layers=0), 2,
     [None, None]),
    (dict(sliding_window=3, layer_types=["full_attention", "sliding_attention"]), 2, [None, 3]),
]  # fmt: skip


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("fields, layers, want", LITERAL)
def test_layer_windows_literal_cases(impl, fields, layers, want):
    """SERVE-LAYER-WINDOWS on hand-written configs (no transformers needed)."""
    assert IMPLS[impl](SimpleNamespace(num_hidden_layers=layers, **fields)) == want


def test_accepted_layer_windows_widen_cohere2_only():
    """SERVE-LAYER-WINDOWS: Cohere2's sliding layers may keep W or W + 1 keys (vLLM 0.33), no other
    model type's, and a Cohere2 config without sliding layers only its Nones."""
    cohere2 = SimpleNamespace(model_type="cohere2", num_hidden_layers=4, sliding_window=8)
    assert serving.accepted_layer_windows(cohere2, [8, 8, 8, None]) == [[8, 8, 8, None], [9, 9, 9, None]]
    gemma3 = SimpleNamespace(model_type="gemma3_text", num_hidden_layers=2, sliding_window=8)
    assert serving.accepted_layer_windows(gemma3, [8, None]) == [[8, None]]
    assert serving.accepted_layer_windows(cohere2, [None] * 4) == [[None] * 4]


BAD = [
    (dict(sliding_window=4), "num_hidden_layers"),
    (dict(num_hidden_layers=0, sliding_window=4), "num_hidden_layers"),
    (dict(num_hidden_layers=True, sliding_window=4), "num_hidden_layers"),
    (dict(num_hidden_layers=3, sliding_window=4, layer_types=["full_attention"] * 2), "layer_types"),
    (dict(num_hidden_layers=2, sliding_window=4, layer_types=["full_attention", "chunked_attention"]),
     "layer_types"),
    (dict(num_hidden_layers=2, sliding_window=None, layer_types=["sliding_attention"] * 2), "sliding_window"),
    (dict(num_hidden_layers=2, model_type="mistral", sliding_window=0), "sliding_window"),
    (dict(num_hidden_layers=2, model_type="gemma3_text", sliding_window=4, sliding_window_pattern=0),
     "sliding_window_pattern"),
    (dict(num_hidden_layers=2, model_type="qwen2", sliding_window=4, use_sliding_window=True,
          max_window_layers="2"), "max_window_layers"),
]  # fmt: skip


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("fields, argument", BAD)
def test_layer_windows_rejects_bad_configs(impl, fields, argument):
    """SERVE-ERRORS for layer_windows: ValueError naming the offending config field."""
    with pytest.raises(ValueError, match=argument):
        IMPLS[impl](SimpleNamespace(**fields))


# SERVE-LAYER-WINDOWS, a missing field takes transformers' default: (config class, every field a
# config.json may hold for it; sliding_window is always given, the others are left out in turn)
FULL_FIELDS = {
    "Qwen2Config": dict(sliding_window=8, use_sliding_window=True, max_window_layers=3),
    "Qwen3Config": dict(sliding_window=4, use_sliding_window=True, max_window_layers=5),
    "Qwen2MoeConfig": dict(sliding_window=8, use_sliding_window=True, max_window_layers=4),
    "Qwen3MoeConfig": dict(sliding_window=8, use_sliding_window=True),
    "Gemma3TextConfig": dict(sliding_window=8, sliding_window_pattern=3),
    "Cohere2Config": dict(sliding_window=8, sliding_window_pattern=2),
}
OMITTED = [
    (cls, field)
    for cls, fields in FULL_FIELDS.items()
    for field in [None, *fields]
    if field != "sliding_window"
]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("cls_name, omitted", OMITTED, ids=[f"{c}-without-{f}" for c, f in OMITTED])
def test_a_missing_field_takes_transformers_default(impl, cls_name, omitted):
    """SERVE-LAYER-WINDOWS on a config.json without one optional field (or none): the plain config
    gives what transformers' class builds from the same fields, its default filled in (30 layers,
    so Qwen's max_window_layers default 28 shows)."""
    transformers = pytest.importorskip("transformers", reason="transformers (the 'peers' extra) absent")
    fields = {k: v for k, v in FULL_FIELDS[cls_name].items() if k != omitted}
    config = getattr(transformers, cls_name)(num_hidden_layers=30, **fields)
    plain = SimpleNamespace(model_type=config.model_type, num_hidden_layers=30, **fields)
    want = _transformers_windows(config)
    assert IMPLS[impl](plain) == want
    assert IMPLS[impl](config) == want


def test_cohere2_sliding_layers_see_w_keys_in_transformers():
    """SERVE-LAYER-WINDOWS, Cohere2's position: transformers' own Cohere2 model (eager attention)
    lets each query of a sliding layer see exactly min(i + 1, W) keys, W = config.sliding_window,
    which is the window layer_windows gives that layer."""
    transformers = pytest.importorskip("transformers", reason="transformers (the 'peers' extra) absent")
    import torch

    window, seq_len = 3, 7
    config = transformers.Cohere2Config(
        num_hidden_layers=4, hidden_size=16, intermediate_size=32, num_attention_heads=2,
        num_key_value_heads=1, vocab_size=32, sliding_window=window, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Cohere2Model(config).eval()
    with torch.no_grad():
        out = model(torch.randint(0, 32, (1, seq_len)), output_attentions=True)
    windows = serving.layer_windows(config)
    assert windows == [window, window, window, None]
    for layer, weights in enumerate(out.attentions):
        seen = (weights[0] > 0).sum(-1)  # [heads, queries]: keys with nonzero weight
        kept = windows[layer] or seq_len
        want = torch.tensor([min(i + 1, kept) for i in range(seq_len)]).expand_as(seen)
        assert torch.equal(seen, want), (layer, seen)
