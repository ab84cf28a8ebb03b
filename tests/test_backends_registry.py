"""The backend registry: built-ins, --backend-module specs, entry points, protocol checks."""

from __future__ import annotations

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
