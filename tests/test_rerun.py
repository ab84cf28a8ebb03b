"""The rerun line of `opconform run` run outside the checkout, as an installed suite is run."""

from __future__ import annotations

import json
import shlex
import subprocess

from report_runs import _env, opconform

NOISY_BACKEND = '''\
"""eps-outside-sqrt that warns like torch.jit on every call, and has no Gemma op (a skip)."""
import warnings

from backends import NotImplementedOp
from mutants.norms import EpsOutsideSqrt


class NoisyEpsOutsideSqrt(EpsOutsideSqrt):
    name = "noisy-eps-outside-sqrt"
    gemma_rms_norm = NotImplementedOp("no Gemma kernel")

    def rms_norm(self, x, weight, *, eps):
        warnings.warn("`torch.jit.script_method` is deprecated", DeprecationWarning)
        return super().rms_norm(x, weight, eps=eps)


BACKEND = NoisyEpsOutsideSqrt()
'''


def test_rerun_line_works_from_the_start_folder_with_filters_and_skip_reasons(tmp_path):
    """The printed rerun was a rootdir-relative node id ('test_norms.py::...', not found from the
    folder the run started in): it now reruns the case from there and fails with the same clause.
    The run outside the checkout gets the suite's warning filters and -ra (skip reasons)."""
    (tmp_path / "noisy_norms.py").write_text(NOISY_BACKEND)
    proc = opconform("run", "--backend-module", "noisy_norms", "--device", "cpu", "--profile", "ci",
                     "-n", "0", "--out", str(tmp_path / "out"), "--", "-k", "rms_norm_matches_oracle",
                     cwd=tmp_path)  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]
    assert "SKIPPED" in proc.stdout and "no Gemma kernel" in proc.stdout, proc.stdout[-3000:]
    assert "torch.jit.script_method" not in output, output[-3000:]
    document = json.loads((tmp_path / "out" / "report.json").read_text())
    [failure] = [r["failure"] for r in document["results"] if r.get("failure")]
    assert (
        failure["clause"] == "NORM-RMS"
        and f"rerun: `{failure['rerun']}`" in (tmp_path / "out" / "report.md").read_text()
    )
    rerun = subprocess.run(shlex.split(failure["rerun"]) + ["-rf"], cwd=tmp_path, env=_env(),
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    output = rerun.stdout + rerun.stderr
    assert rerun.returncode == 1, output[-3000:]
    assert "1 failed" in output and "NORM-RMS" in output, output[-3000:]
    assert "test_rms_norm_matches_oracle[noisy-eps-outside-sqrt-cpu]" in output
    assert "FAILED test_norms.py::test_rms_norm_matches_oracle[" in output and "FAILED ::" not in output


def test_rerun_target_without_the_item_names_the_suite_module_or_an_absolute_path(tmp_path):
    """An xdist controller has only the node id: a suite module is named by --pyargs (the id was
    'test_norms.py::...', relative to site-packages), a test under the rootdir by absolute path."""
    from types import SimpleNamespace

    import pytest

    from conformance import rerun

    config = SimpleNamespace(stash=pytest.Stash(), rootpath=tmp_path)
    assert rerun.target_of(config, "test_norms.py::test_x[a-cpu]") == [
        "--pyargs",
        "conformance.test_norms::test_x[a-cpu]",
    ]
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_norms.py").write_text("")
    assert rerun.target_of(config, "tests/test_norms.py::test_x[a-cpu]") == [
        f"{tmp_path / 'tests' / 'test_norms.py'}::test_x[a-cpu]"
    ]
