"""The rope oracles (reference/rope.py, reference/rope_config.py) against a per-element brute force
written from spec/rope.md in complex form, against transformers' own functions for every rope type
and the models that ship them, and against the relative-position invariance of the rotation."""

from __future__ import annotations

import cmath
import math
from types import SimpleNamespace

import pytest
import torch

from conformance.bad_input.rope import ERRORS
from reference import rope

transformers = pytest.importorskip("transformers")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402


def _cache(inv_freq, max_position=64, attention_factor=1.0):
    return rope.rope_cos_sin(torch.arange(max_position), inv_freq, attention_factor=attention_factor)


def _brute_force(positions, x, cache, is_neox_style):
    """ROPE-APPLY per element: the pair (a, b) of frequency i as a + ib, times cos + i sin of the
    cache row (cat(cos, sin)); NeoX pairs (i, i + r/2), GPT-J (2i, 2i + 1); the rest unchanged."""
    out = x.double().clone()
    r = cache.shape[-1]
    for t in range(x.shape[0]):
        row = cache[int(positions[t])].double()
        for h in range(x.shape[1]):
            for i in range(r // 2):
                first, second = (i, i + r // 2) if is_neox_style else (2 * i, 2 * i + 1)
                z = complex(float(x[t, h, first]), float(x[t, h, second])) * complex(row[i], row[r // 2 + i])
                out[t, h, first], out[t, h, second] = z.real, z.imag
    return out


@pytest.mark.parametrize("is_neox_style", [True, False])
@pytest.mark.parametrize("rotary_dim, head_dim", [(8, 8), (4, 10), (6, 6)])
def test_rotary_embedding_equals_the_brute_force(is_neox_style, rotary_dim, head_dim):
    gen = torch.Generator().manual_seed(rotary_dim + head_dim)
    inv = rope.rope_inv_freq(SimpleNamespace(head_dim=rotary_dim, max_position_embeddings=64),
                             seq_len=None, layer_type=None)[0]  # fmt: skip
    cache = _cache(inv)
    positions = torch.tensor([5, 0, 63, 5, 17])  # repeated, unordered, the last row
    q, k = torch.randn(5, 3, head_dim, generator=gen), torch.randn(5, 1, head_dim, generator=gen)
    got_q, got_k = rope.rotary_embedding(positions, q, k, cache, is_neox_style=is_neox_style)
    torch.testing.assert_close(
        got_q, _brute_force(positions, q, cache, is_neox_style), rtol=1e-12, atol=1e-12
    )
    torch.testing.assert_close(
        got_k, _brute_force(positions, k, cache, is_neox_style), rtol=1e-12, atol=1e-12
    )
    assert torch.equal(got_q[..., rotary_dim:], q[..., rotary_dim:].double())


def test_cos_sin_is_exp_of_position_times_frequency():
    """ROPE-COS-SIN: row p is cat(cos, sin)(p f) * attention_factor, from cmath at long positions."""
    inv = torch.tensor([1.0, 0.3, 1e-4], dtype=torch.float32)
    positions = torch.tensor([[0, 1], [131071, 99999]])
    got = rope.rope_cos_sin(positions, inv, attention_factor=1.25)
    for index in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        for i, f in enumerate(inv.double().tolist()):
            w = 1.25 * cmath.exp(1j * int(positions[index]) * f)
            assert math.isclose(got[index][i], w.real, abs_tol=1e-12)
            assert math.isclose(got[index][3 + i], w.imag, abs_tol=1e-12)


@pytest.mark.parametrize("is_neox_style", [True, False])
def test_scores_depend_only_on_the_position_difference(is_neox_style):
    """Relative-position invariance: q_p . k_s after rope equals q_(p+o) . k_(s+o)."""
    gen = torch.Generator().manual_seed(3)
    inv = rope.rope_inv_freq(SimpleNamespace(head_dim=16, max_position_embeddings=9000),
                             seq_len=None, layer_type=None)[0]  # fmt: skip
    cache = _cache(inv, 9000)
    q, k = torch.randn(4, 2, 16, generator=gen), torch.randn(4, 2, 16, generator=gen)
    p = torch.tensor([3, 100, 7, 0])
    s = torch.tensor([1, 100, 50, 0])
    scores = []
    for offset in (0, 11, 8000):
        rq, _ = rope.rotary_embedding(p + offset, q, k, cache, is_neox_style=is_neox_style)
        _, rk = rope.rotary_embedding(s + offset, q, k, cache, is_neox_style=is_neox_style)
        scores.append((rq * rk).sum(-1))
        norms = rq.norm(dim=-1)
        torch.testing.assert_close(norms, q.double().norm(dim=-1), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(scores[1], scores[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(scores[2], scores[0], rtol=1e-10, atol=1e-10)


# --- transformers as the peer of the frequencies --------------------------------------------------

PHI3_FACTORS = [1.0 + 0.05 * i for i in range(48)]


def _configs():
    """(name, config, layer_type) for each rope type, from transformers' config classes."""
    c = transformers
    llama31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192, "rope_theta": 500000.0}  # fmt: skip
    deepseek = {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32,
                "beta_slow": 1, "original_max_position_embeddings": 4096, "rope_theta": 10000.0}  # fmt: skip
    phi3 = {
        "rope_type": "longrope",
        "short_factor": PHI3_FACTORS,
        "long_factor": [2 * f for f in PHI3_FACTORS],
    }
    gemma3 = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
              "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}  # fmt: skip
    return [
        ("llama-default", c.LlamaConfig(), None),
        ("llama-linear", c.LlamaConfig(rope_parameters={"rope_type": "linear", "factor": 4.0}), None),
        (
            "llama-dynamic",
            c.LlamaConfig(
                rope_parameters={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=2048
            ),
            None,
        ),  # fmt: skip
        ("llama3.1", c.LlamaConfig(rope_parameters=llama31, max_position_embeddings=131072), None),
        ("deepseek-v3", c.DeepseekV3Config(rope_parameters=deepseek, max_position_embeddings=163840), None),
        ("gpt-oss", c.GptOssConfig(), None),
        (
            "phi3-128k",
            c.Phi3Config(
                rope_parameters=phi3, max_position_embeddings=131072, original_max_position_embeddings=4096
            ),
            None,
        ),  # fmt: skip
        ("qwen2-vl", c.Qwen2VLConfig().text_config, None),
        ("gemma3-full", c.Gemma3TextConfig(rope_parameters=gemma3), "full_attention"),
        ("gemma3-sliding", c.Gemma3TextConfig(rope_parameters=gemma3), "sliding_attention"),
        ("stablelm-partial", c.StableLmConfig(), None),
        (
            "proportional",
            c.LlamaConfig(
                rope_parameters={
                    "rope_type": "proportional",
                    "partial_rotary_factor": 0.25,
                    "rope_theta": 1e6,
                }
            ),
            None,
        ),  # fmt: skip
    ]


def _transformers_inv_freq(config, seq_len, layer_type):
    params = config.rope_parameters[layer_type] if layer_type else config.rope_parameters
    kind = params["rope_type"]
    if kind == "default":
        from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        if layer_type:
            return Gemma3RotaryEmbedding.compute_default_rope_parameters(config, layer_type=layer_type)
        if getattr(config, "partial_rotary_factor", None) or params.get("partial_rotary_factor", 1.0) != 1.0:
            # StableLM's own default: the first partial_rotary_factor of head_dim (modeling_stablelm).
            from transformers.models.stablelm.modeling_stablelm import StableLmRotaryEmbedding

            return StableLmRotaryEmbedding.compute_default_rope_parameters(config)
        return LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    kwargs = {"layer_type": layer_type} if layer_type else {}
    return ROPE_INIT_FUNCTIONS[kind](config, None, seq_len=seq_len, **kwargs)


@pytest.mark.parametrize("name, config, layer_type", _configs(), ids=[c[0] for c in _configs()])
@pytest.mark.parametrize("seq_len", [None, 100, 5000, 200000])
def test_inv_freq_equals_transformers(name, config, layer_type, seq_len):
    """ROPE-FREQ for every rope type: the oracle's float64 frequencies and attention factor are
    transformers' float32 ones (within float32's pow rounding)."""
    want, want_factor = _transformers_inv_freq(config, seq_len, layer_type)
    got, factor = rope.rope_inv_freq(config, seq_len=seq_len, layer_type=layer_type)
    torch.testing.assert_close(got, want.double(), rtol=4e-6, atol=0)
    assert math.isclose(factor, float(want_factor), rel_tol=1e-12)


def test_the_rope_types_differ_where_the_contract_says():
    """The peers above would pass a reader that ignores scaling only if the configs did not scale:
    each scaled type moves some frequency from the default, and llama3 leaves the high ones alone."""
    configs = {name: (config, lt) for name, config, lt in _configs()}
    default = rope.rope_inv_freq(transformers.LlamaConfig(rope_parameters={"rope_theta": 500000.0}),
                                 seq_len=None, layer_type=None)[0]  # fmt: skip
    llama3 = rope.rope_inv_freq(configs["llama3.1"][0], seq_len=None, layer_type=None)[0]
    assert llama3[0] == default[0] and math.isclose(llama3[-1], default[-1] / 8)
    short = rope.rope_inv_freq(configs["phi3-128k"][0], seq_len=4096, layer_type=None)[0]
    long = rope.rope_inv_freq(configs["phi3-128k"][0], seq_len=4097, layer_type=None)[0]
    torch.testing.assert_close(short / long, torch.full_like(short, 2.0))
    _, attention = rope.rope_inv_freq(configs["deepseek-v3"][0], seq_len=None, layer_type=None)
    assert attention == 1.0  # mscale == mscale_all_dim: cos/sin unscaled, the softmax scale carries it


def test_softmax_scale_equals_deepseek_v3():
    """ROPE-SOFTMAX-SCALE: DeepseekV3Attention.scaling, and the unscaled scale without mscale_all_dim."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import yarn_apply_mscale

    config = _configs()[4][1]
    base = 192**-0.5
    assert math.isclose(
        rope.rope_softmax_scale(config, scale=base), yarn_apply_mscale(config.rope_parameters, base)
    )
    assert math.isclose(rope.rope_softmax_scale(config, scale=base), base * (0.1 * math.log(40) + 1) ** 2)
    assert rope.rope_softmax_scale(transformers.GptOssConfig(), scale=0.125) == 0.125


def test_legacy_config_json_fields_are_read():
    """ROPE-PARAMS: rope_scaling with 'type', rope_theta beside it, Gemma3's rope_local_base_freq."""
    legacy = SimpleNamespace(hidden_size=64, num_attention_heads=4, max_position_embeddings=128,
                             rope_theta=1e6, rope_scaling={"type": "linear", "factor": 2.0},
                             rope_local_base_freq=1e4,
                             layer_types=["sliding_attention", "full_attention"])  # fmt: skip
    d = rope.rope_parameters(legacy)
    assert (d["rope_type"], d["rope_theta"], d["rotary_dim"]) == ("linear", 1e6, 16)
    assert rope.rope_parameters(legacy, "sliding_attention")["rope_theta"] == 1e4
    gemma = transformers.Gemma3TextConfig(rope_local_base_freq=1e4)
    got = rope.rope_inv_freq(gemma, seq_len=None, layer_type="sliding_attention")[0]
    torch.testing.assert_close(got[1], torch.tensor(1e4 ** (-2 / 256), dtype=torch.float64))


# --- transformers as the peer of the application ---------------------------------------------------


def _hf_cos_sin(cache, positions):
    r = cache.shape[-1] // 2
    rows = cache[positions]
    return torch.cat([rows[:, :r]] * 2, -1)[None], torch.cat([rows[:, r:]] * 2, -1)[None]


@pytest.mark.parametrize("rotary_dim", [16, 8])
def test_neox_equals_llama_and_stablelm_partial(rotary_dim):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    gen = torch.Generator().manual_seed(rotary_dim)
    cache = _cache(1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)), 300)
    positions = torch.tensor([299, 3, 3, 150])
    q, k = (
        torch.randn(4, 4, 16, generator=gen, dtype=torch.float64),
        torch.randn(4, 2, 16, generator=gen, dtype=torch.float64),
    )
    cos, sin = _hf_cos_sin(cache, positions)
    # StableLM's attention rotates q[..., :rotary_ndims] and concatenates the rest (modeling_stablelm).
    hq, hk = apply_rotary_pos_emb(
        q.transpose(0, 1)[None, ..., :rotary_dim], k.transpose(0, 1)[None, ..., :rotary_dim], cos, sin
    )
    got_q, got_k = rope.rotary_embedding(positions, q, k, cache, is_neox_style=True)
    torch.testing.assert_close(got_q[..., :rotary_dim], hq[0].transpose(0, 1), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_k[..., :rotary_dim], hk[0].transpose(0, 1), rtol=1e-12, atol=1e-12)


def test_gptj_equals_glm_and_deepseek_interleave():
    """GPT-J pairing is GLM's apply_rotary_pos_emb (partial, interleaved); DeepSeek's
    apply_rotary_pos_emb_interleave is the GPT-J result de-interleaved (evens then odds)."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import apply_rotary_pos_emb_interleave
    from transformers.models.glm.modeling_glm import apply_rotary_pos_emb as glm_apply

    gen = torch.Generator().manual_seed(7)
    cache = _cache(1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8)), 50)
    positions = torch.tensor([49, 0, 10])
    q, k = (
        torch.randn(3, 2, 12, generator=gen, dtype=torch.float64),
        torch.randn(3, 1, 12, generator=gen, dtype=torch.float64),
    )
    cos, sin = _hf_cos_sin(cache, positions)
    got_q, got_k = rope.rotary_embedding(positions, q, k, cache, is_neox_style=False)
    hq, hk = glm_apply(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    torch.testing.assert_close(got_q, hq[0].transpose(0, 1), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_k, hk[0].transpose(0, 1), rtol=1e-12, atol=1e-12)
    dq, _ = apply_rotary_pos_emb_interleave(
        q[..., :8].transpose(0, 1)[None], k[..., :8].transpose(0, 1)[None], cos, sin
    )
    deinterleaved = torch.cat([got_q[..., 0:8:2], got_q[..., 1:8:2]], dim=-1)
    torch.testing.assert_close(deinterleaved, dq[0].transpose(0, 1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("model", ["qwen2_vl", "qwen3_vl"])
def test_mrope_equals_qwen_vl(model):
    """ROPE-MROPE: Qwen2-VL's sections and Qwen3-VL's interleaved layout, through transformers'
    rotary embedding module and apply_rotary_pos_emb (float32 angles: positions kept small)."""
    if model == "qwen2_vl":
        from transformers import Qwen2VLTextConfig as Config
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding as Module
        from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb
    else:
        from transformers import Qwen3VLTextConfig as Config
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding as Module
        from transformers.models.qwen3_vl.modeling_qwen3_vl import apply_rotary_pos_emb
    section = [4, 6, 6]
    parameters = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section}
    config = Config(hidden_size=128, num_attention_heads=4, head_dim=32, num_key_value_heads=2,
                    rope_parameters=parameters)  # fmt: skip
    module = Module(config)
    gen = torch.Generator().manual_seed(1)
    positions = torch.randint(0, 40, (3, 5), generator=gen)
    q, k = torch.randn(5, 4, 32, generator=gen), torch.randn(5, 2, 32, generator=gen)
    cos, sin = module(q, positions[:, None, :])
    if model == "qwen2_vl":
        hq, hk = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    else:
        hq, hk = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    inv, factor = rope.rope_inv_freq(config, seq_len=None, layer_type=None)
    cache = _cache(inv.float(), 40, factor)
    got_q, got_k = rope.mrope(positions, q, k, cache, mrope_section=section, is_neox_style=True,
                              mrope_interleaved=model == "qwen3_vl")  # fmt: skip
    torch.testing.assert_close(got_q, hq[0].transpose(0, 1).double(), rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(got_k, hk[0].transpose(0, 1).double(), rtol=2e-5, atol=2e-5)
    plain, _ = rope.rotary_embedding(positions[0], q, k, cache, is_neox_style=True)
    assert not torch.allclose(plain, got_q)  # the h and w rows matter


def test_kernel_args_read_back_and_reject_the_pitfall():
    """ROPE-KERNEL-ARGS: every API's value reads back as the style; torch_npu's 'interleaved' and
    a bool rotary_mode are not documented values."""
    for style in (True, False):
        for api, args in rope.rope_kernel_args(style).items():
            assert rope.kernel_style(api, args) is style
    assert rope.kernel_style("torch_npu.npu_mrope", {"rotary_mode": "interleave"}) is False
    # flashinfer's cos/sin-cache ops and sglang's own kernel spell it is_neox (True = NeoX).
    assert rope.kernel_style("flashinfer.apply_rope_with_cos_sin_cache_inplace", {"is_neox": True}) is True
    assert rope.kernel_style("flashinfer.apply_rope", {"interleave": True}) is False
    assert rope.kernel_style("sglang.apply_rope_with_cos_sin_cache_inplace", {"is_neox": False}) is False
    assert not rope.known_kernel_api("tensorrt_llm") and rope.known_kernel_api("sglang.x")
    with pytest.raises(ValueError, match="both pairings"):
        rope.kernel_style("flashinfer", {"interleave": True, "is_neox": True})
    for api, args in [("torch_npu", {"rotary_mode": "interleaved"}), ("flashinfer", {"interleave": 1}),
                      ("cuda", {"is_neox_style": True}), ("vllm", {})]:  # fmt: skip
        with pytest.raises(ValueError, match="api|interleave|rotary_mode|is_neox_style"):
            rope.kernel_style(api, args)


@pytest.mark.parametrize("case", ERRORS, ids=lambda c: c.id)
def test_oracle_rejects_bad_input(case):
    with pytest.raises(case.exception, match=case.match):
        case.call(rope)


_MODULES = {
    "llama3.1": "llama.modeling_llama.LlamaRotaryEmbedding",
    "deepseek-v3": "deepseek_v3.modeling_deepseek_v3.DeepseekV3RotaryEmbedding",
    "gpt-oss": "gpt_oss.modeling_gpt_oss.GptOssRotaryEmbedding",
    "phi3-128k": "phi3.modeling_phi3.Phi3RotaryEmbedding",
    "gemma3-full": "gemma3.modeling_gemma3.Gemma3RotaryEmbedding",
    "gemma3-sliding": "gemma3.modeling_gemma3.Gemma3RotaryEmbedding",
}


@pytest.mark.parametrize("name", sorted(_MODULES))
def test_transformers_cos_sin_is_within_the_cos_sin_tolerance(name):
    """ROPE-COS-SIN and ROPE-TOL on a correct float32 implementation: each model's rotary module
    (cos, sin times attention_scaling, from its own float32 inv_freq) is the oracle's rows for that
    inv_freq within the rope-cos-sin row and angle_scale, at positions up to 20000 (past Phi-3's
    4096, so its long factors)."""
    import importlib

    from conformance.tolerances import angle_scale, tolerance

    config, layer_type = {n: (c, lt) for n, c, lt in _configs()}[name]
    module_path, cls = _MODULES[name].rsplit(".", 1)
    module = getattr(importlib.import_module(f"transformers.models.{module_path}"), cls)(config)
    positions = torch.tensor([[0, 1, 77, 4095, 4096, 12345, 19999]])
    x = torch.zeros(1, dtype=torch.float32)
    cos, sin = module(x, positions, layer_type) if layer_type else module(x, positions)
    prefix = f"{layer_type}_" if layer_type else ""
    inv = getattr(module, f"{prefix}inv_freq")
    factor = getattr(module, f"{prefix}attention_scaling", None) or module.attention_scaling
    want = rope.rope_cos_sin(positions[0], inv, attention_factor=factor)
    h = inv.shape[0]
    got = torch.cat([cos[0, :, :h], sin[0, :, :h]], dim=-1).double()
    tol = tolerance("rope-cos-sin", torch.float32)
    allowed = tol.atol * angle_scale(positions[0], inv, factor) + tol.rtol * want.abs()
    assert ((got - want).abs() <= allowed).all(), ((got - want).abs() / allowed).max()


@pytest.mark.parametrize(
    "omitted", [(), ("rope_theta",), ("rope_local_base_freq",), ("rope_theta", "rope_local_base_freq")]
)
@pytest.mark.parametrize("form", [dict, SimpleNamespace])
def test_gemma3_config_json_without_bases_takes_gemma3_defaults(omitted, form):
    """ROPE-PARAMS, ROPE-LAYER: a gemma3_text config.json (a dict or a namespace) that leaves out
    rope_theta or rope_local_base_freq reads as transformers' Gemma3TextConfig built from it: global
    1e6, local 1e4 (default_theta), the sliding layers without the global rope_scaling."""
    fields = {"head_dim": 64, "max_position_embeddings": 8192, "num_hidden_layers": 6, "rope_theta": 5e5,
              "rope_local_base_freq": 2e4,
              "rope_scaling": {"rope_type": "linear", "factor": 8.0}}  # fmt: skip
    fields = {key: value for key, value in fields.items() if key not in omitted}
    hf = transformers.Gemma3TextConfig(**fields)
    plain = form(model_type="gemma3_text", **fields)
    for layer_type in ("sliding_attention", "full_attention"):
        params = hf.rope_parameters[layer_type]
        got = rope.rope_parameters(plain, layer_type)
        assert (got["rope_type"], got["rope_theta"]) == (params["rope_type"], params["rope_theta"]), (
            layer_type
        )
        inv = rope.rope_inv_freq(plain, seq_len=None, layer_type=layer_type)[0]
        want = rope.rope_inv_freq(hf, seq_len=None, layer_type=layer_type)[0]
        torch.testing.assert_close(inv, want, rtol=0, atol=0)
    sliding = rope.rope_inv_freq(plain, seq_len=None, layer_type="sliding_attention")[0]
    local = 2e4 if "rope_local_base_freq" not in omitted else 1e4
    torch.testing.assert_close(sliding[1], torch.tensor(local ** (-2 / 64), dtype=torch.float64))
