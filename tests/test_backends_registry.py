"""The backend registry: built-ins, --backend-module specs, entry points, protocol checks."""

from __future__ import annotations

import inspect
from importlib import metadata

import pytest
import torch

import backends


def test_builtin_backends_follow_the_protocol():
    """Every built-in has a name and unavailable(); names match the BUILTIN keys."""
    found = backends.builtin_backends()
    assert [b.name for b in found] == list(backends.BUILTIN)
    assert all(isinstance(b, backends.Backend) for b in found)


def test_npu_backend_skips_without_torch_npu():
    """The real npu backend gives a reason off-NPU; the emulated one runs on cpu."""
    from backends.npu import BACKEND, EMULATED

    assert "npu" in BACKEND.unavailable(torch.device("cpu"))
    assert EMULATED.unavailable(torch.device("cpu")) is None


@pytest.mark.parametrize(
    "spec, words",
    [
        (":BACKEND", "MODULE[:ATTR]"),
        ("no_such_module_xyz", "cannot import"),
        ("json:loads", "expected a backend"),
        ("json", "has no attribute 'BACKEND'"),
    ],
)
def test_bad_module_specs_raise_backend_error(spec, words):
    """A spec that cannot give backends raises BackendError naming it."""
    with pytest.raises(backends.BackendError, match=words.replace("[", r"\[").replace("]", r"\]")):
        backends.load_backend_module(spec)


def test_object_without_name_is_rejected():
    """The protocol requires a non-empty str name."""

    class Nameless:
        def unavailable(self, device):
            return None

    with pytest.raises(backends.BackendError, match="name"):
        backends._as_backends(Nameless(), "test")


def test_entry_points_are_loaded(monkeypatch):
    """Backends registered under the opconform.backends group are found."""
    point = metadata.EntryPoint(name="emu", value="backends.npu:EMULATED", group=backends.ENTRY_POINT_GROUP)
    monkeypatch.setattr(
        backends.metadata, "entry_points", lambda group: [point] if group == point.group else []
    )
    assert [b.name for b in backends.entry_point_backends()] == ["npu-emulated"]


def test_duplicate_names_are_an_error():
    """Two different backends with one name cannot both be selected."""
    from backends.native import NativeBackend

    with pytest.raises(backends.BackendError, match="two different backends"):
        backends.unique_by_name([NativeBackend(), NativeBackend()])


def test_not_implemented_reason():
    """An op the backend lacks gives the 'not implemented' reason used by reports."""
    from backends.native import BACKEND

    assert backends.not_implemented_reason(BACKEND, "gelu_and_mul") is None
    assert backends.not_implemented_reason(BACKEND, "npu_geglu_args").startswith("not implemented")


def test_not_implemented_op_states_its_reason():
    """NotImplementedOp in a class body removes an (inherited) op; the skip message carries the reason."""
    from backends.flex import COMPILED

    reason = backends.not_implemented_reason(COMPILED, "encoder_attention_mask")
    assert reason.startswith("not implemented: backend 'flex-compiled' has no op 'encoder_attention_mask': ")
    assert "create_mask is not compiled" in reason
    assert not callable(COMPILED.encoder_attention_mask)
    assert backends.not_implemented_reason(COMPILED, "prefill_attention") is None
    with pytest.raises(KeyError, match="unknown op 'gelu_and_mull'"):
        backends.not_implemented_reason(COMPILED, "gelu_and_mull")


def test_import_attr_is_public():
    """import_attr resolves MODULE[:ATTR] with a default attribute, for the bench and the plugin."""
    assert backends.import_attr("backends.npu:EMULATED").name == "npu-emulated"
    assert backends.import_attr("backends.protocols", default_attr="OPS") is backends.OPS


def _parameters(function) -> list[tuple[str, str]]:
    """Positional and keyword-only parameter names and kinds (not self, *args or **kwargs)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [
        (p.name, "positional" if p.kind in kinds else p.kind.name)
        for p in inspect.signature(function).parameters.values()
        if p.name != "self"
    ]


def test_op_table_matches_the_family_protocols():
    """OPS is the union of the family protocols' methods, each op in its own family's protocol."""
    from backends.protocols import protocol_ops

    declared = {op: family for family, proto in backends.FAMILIES.items() for op in protocol_ops(proto)}
    assert declared == backends.OPS


@pytest.mark.parametrize("op", sorted(backends.OPS))
def test_protocol_signature_matches_the_oracle(op):
    """Each op's protocol method has the parameter names and kinds of the oracle of that name, in
    the family's oracle module ``reference.<family>``."""
    import importlib

    family = backends.OPS[op]
    method = getattr(backends.FAMILIES[family], op)
    module = importlib.import_module(f"reference.{family}")
    oracles = [getattr(module, op)] if hasattr(module, op) else []
    if not oracles:
        assert op == "dpm_scheduler"  # built from a config: the oracle is reference.scheduler's class
        return
    assert _parameters(method) == _parameters(oracles[0])


def test_builtin_op_methods_match_the_protocols():
    """Every op a built-in backend defines has the protocol's parameter names and kinds."""
    from backends.flex import COMPILED

    for backend in [*backends.builtin_backends(), COMPILED]:
        for op, family in backends.OPS.items():
            method = getattr(backend, op, None)
            if callable(method):
                expected = _parameters(getattr(backends.FAMILIES[family], op))
                assert _parameters(method) == expected, (backend.name, op)
