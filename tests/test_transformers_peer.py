"""The built-in ``transformers`` backend, the field's reference (transformers' own modules).

The demand that it has no MUST failure is the suite's own run: the backend is built in, so
``pytest -n auto`` (CI: the ci profile) runs every property on it and fails on any MUST failure that
expectations/transformers.toml does not declare. A false alarm of the kind issue 36 found (correct
field code failing a MUST demand) therefore fails CI. Its SHOULD failures are expected: transformers'
modules validate nothing. This module checks what that run cannot: which ops the backend computes
(an op turned n/i would silently leave its clauses unchecked), that it validates nothing (a check
added to an adapter would be the suite's, not transformers'), the manifest's one entry, and the
reproducer of the real transformers bug the suite finds at SHOULD level.
"""

from __future__ import annotations

import pytest
import torch

from backends import builtin_backends, not_implemented_reason
from backends.protocols import OPS
from conformance import expectations as manifests
from conformance import spec_index

pytest.importorskip("transformers", reason="transformers (peers extra) is not installed")

BACKEND = "transformers"
# The ops transformers has code for (backends/transformers_peer/): its section docstrings name the modules.
COMPUTED = {
    "attention", "decode_attention", "encoder_attention_mask", "fast_gelu", "fused_add_rms_norm", "fused_moe",
    "gelu_and_mul", "gemma_fused_add_rms_norm", "gemma_rms_norm", "mrope", "new_gelu", "prefill_attention",
    "quick_gelu", "rms_norm", "rope_cos_sin", "rope_inv_freq", "rope_softmax_scale", "rotary_embedding",
    "select_experts", "silu_and_mul", "silu_clamped_and_mul", "swiglu_limit", "swiglu_oai_and_mul",
    "swiglu_step_and_mul",
}  # fmt: skip


def _backend():
    return next(b for b in builtin_backends() if b.name == BACKEND)


def test_the_peer_computes_every_op_transformers_has():
    """The ops it implements are exactly COMPUTED: one that became n/i would leave its clauses unchecked."""
    backend = _backend()
    assert {op for op in OPS if not_implemented_reason(backend, op) is None} == COMPUTED


def test_the_peer_validates_nothing():
    """Bad input reaches transformers' code unchecked (a ValueError of the adapter would be the suite's)."""
    backend = _backend()
    x, weight = torch.ones(2, 4), torch.ones(4)
    assert backend.rms_norm(x, weight, eps=0.0).shape == (2, 4)  # eps=0: NORM-ERRORS' record, accepted
    assert backend.silu_and_mul(torch.ones(2, 6)).shape == (2, 3)


def test_the_manifest_declares_only_the_platform_nan_bug():
    """expectations/transformers.toml: one entry, ATTN-NAN's torch CPU SDPA bug, on cpu, with its issue."""
    directory = manifests.builtin_manifest_dir()
    entries = [
        e for e in manifests.load_manifests([directory], known_clauses=spec_index.load_clauses())
        if e.backend == BACKEND
    ]  # fmt: skip
    assert len(entries) == 1, entries
    (entry,) = entries
    assert entry.reason == "bug" and entry.device == "cpu" and "pytorch/pytorch/issues" in entry.issue
    nan = "test_attention.py::test_prefill_nan_reaches_exactly_the_rows_that_see_it[x]"
    where = {"backend": BACKEND, "device": "cpu", "dtype": None}
    assert entry.matches(nodeid=nan, clauses=["ATTN-NAN"], **where) == "yes"
    other = "test_attention.py::test_prefill_matches_oracle[x]"
    assert entry.matches(nodeid=other, clauses=["ATTN-PREFILL"], **where) != "yes"


def test_per_layer_yarn_truncate_is_ignored():
    """SHOULD_BUGS' reproducer: a per-layer yarn dict's truncate=False gives the truncated frequencies."""
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    yarn = {"rope_type": "yarn", "factor": 4.0, "truncate": False}
    shape = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2)
    nested = transformers.Qwen2Config(
        **shape, layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default"}, "full_attention": yarn},
    )  # fmt: skip
    per_layer = ROPE_INIT_FUNCTIONS["yarn"](nested, None, layer_type="full_attention")[0]
    flat = [transformers.Qwen2Config(**shape, rope_parameters={**yarn, "truncate": t}) for t in (False, True)]
    unrounded, truncated = (ROPE_INIT_FUNCTIONS["yarn"](config, None)[0] for config in flat)
    assert not torch.equal(unrounded, truncated)  # truncate matters for this dict
    assert torch.equal(per_layer, truncated), "fixed in transformers: remove SHOULD_BUGS' entry"
