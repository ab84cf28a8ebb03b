"""What the suite says to a user in their own terms: a file path given as --backend-module, a
backend op returning None, and the skip list, each named without the suite's own code or paths."""

from __future__ import annotations

import re

import pytest
from suite_runner import SelectionConfig, run_suite

from conformance.harness import selection


@pytest.mark.parametrize(
    "spec, give",
    [("{dir}/acme_file.py", "acme_file"), ("./acme_file.py", "acme_file"),
     ("{dir}/acme_file.py:OTHER", "acme_file:OTHER"), ("{dir}/acme_file", "acme_file")],
)  # fmt: skip
def test_a_file_path_as_backend_module_says_what_to_give(tmp_path, monkeypatch, spec, give):
    """--backend-module path/to/file.py was importlib's relative-import error (or 'No module named
    path/to/file'): one line saying which module name to give and from which folder."""
    (tmp_path / "acme_file.py").write_text("BACKEND = None\n")
    monkeypatch.chdir(tmp_path)
    spec = spec.format(dir=tmp_path)
    with pytest.raises(pytest.UsageError) as error:
        selection.backends(SelectionConfig(backend_module=[spec]))
    said = str(error.value)
    assert said == (
        f"--backend-module {spec}: expected a module name, not a file path: give --backend-module {give} "
        f"and run from {tmp_path} (or set PYTHONPATH={tmp_path})"
    ), said


def test_a_missing_file_and_a_relative_module_name_are_one_line(tmp_path, monkeypatch):
    """A path to no file says so; a relative module name asks for the full one."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(pytest.UsageError, match=r"not a file path \(there is no .*nothere\.py\): give"):
        selection.backends(SelectionConfig(backend_module=["sub/nothere.py"]))
    with pytest.raises(pytest.UsageError, match=r"\.acme: a relative module name; give its full dotted name"):
        selection.backends(SelectionConfig(backend_module=[".acme"]))


RETURNS_NONE = """
class ReturnsNone:
    name = "returns-none"

    def unavailable(self, device):
        return None if device.type == "cpu" else "cpu only"

    def rms_norm(self, x, weight, *, eps):
        return None


BACKEND = ReturnsNone()
"""


def test_a_none_return_and_the_skip_list_say_what_the_backend_did(tmp_path):
    """A backend returning None failed NORM-DTYPE with the suite's own `AttributeError: 'NoneType'
    object has no attribute 'dtype'`, and -ra listed each skip under the suite's
    `conformance/plugin.py:377` (now conformance/harness/plugin.py):
    the failure names the op that returned None, the skip list the backend@device."""
    (tmp_path / "returns_none.py").write_text(RETURNS_NONE)
    document = run_suite(
        tmp_path, paths=["conformance/test_norms.py"], modules=["returns_none"], pythonpath=[tmp_path],
        extra=["-k", "output_dtype_and_float32 or should_reject_bad_input", "-ra", "--device=cpu"],
    )  # fmt: skip
    failed = [r for r in document["results"] if r["outcome"] == "failed"]
    assert failed and all(r["failure"]["clause"] == "NORM-DTYPE" for r in failed), failed
    for case in failed:
        message = case["failure"]["message"]
        assert message.startswith(
            "[NORM-DTYPE] rms_norm on backend 'returns-none' @ cpu: rms_norm returned None;"
        )
        assert "NormOps.rms_norm returns torch.Tensor" in message and "NoneType" not in message, message
    should = [r for r in document["results"] if r["outcome"] == "failed (SHOULD)"]
    assert should and all("accepted bad input" in r["failure"]["message"] for r in should)
    skipped = [line for line in document["stdout"].splitlines() if line.startswith("SKIPPED")]
    assert skipped and all(
        re.match(r"SKIPPED \[\d+\] returns-none@cpu: not implemented: ", s) for s in skipped
    )
    assert not any("conformance" in line for line in skipped), skipped
