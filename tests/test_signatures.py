"""The load-time signature check (conformance/signatures.py): what it reports, what it accepts,
and a wrong and a right backend through plain pytest from the folder holding the user's module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import backends
from backends.native import NativeBackend
from conformance import signatures
from mutants.norms import EpsilonKeyword

REPO = Path(__file__).resolve().parent.parent


def test_every_builtin_backend_matches_the_protocols():
    """No built-in backend that imports here has a mismatched op (the check never fails them)."""
    checked = 0
    for name, target in backends.BUILTIN.items():
        try:
            backend = backends.import_attr(target)
        except backends.BackendError:  # an optional framework missing here (torch_npu...)
            continue
        assert signatures.mismatches(backend) == {}, name
        checked += 1
    assert checked >= 4


def test_the_issue_example_is_one_line_naming_eps():
    assert signatures.mismatches(EpsilonKeyword()) == {
        "rms_norm": "backend 'rms-norm-epsilon-keyword': rms_norm(x, weight, epsilon=1e-06) does not "
        "match NormOps.rms_norm(x, weight, *, eps): no parameter 'eps'"
    }


class Wrong:
    name = "wrong"

    def unavailable(self, device):
        return None

    def gelu_and_mul(self, approximate, x): ...  # the option where x goes

    def attention(self, q, *, k, v, allowed, scale): ...  # k, v keyword-only

    def encoder_attention_mask(self, seq_len, *, sliding_window, padding_mask=None, device=None): ...

    def swa_decode_mask(self, seq_lens, kv_len, *, window, block): ...  # a required extra

    def silu_and_mul(self): ...  # x missing


@pytest.mark.parametrize(
    ("op", "problem"),
    [
        ("gelu_and_mul", "'approximate' is argument 1, where the protocol passes 'x'"),
        ("attention", "'k' is keyword-only; the protocol passes it as argument 2"),
        ("encoder_attention_mask", "'sliding_window' has no default (the protocol's is None)"),
        ("swa_decode_mask", "required parameter 'block' is not in the protocol"),
        ("silu_and_mul", "'x' is missing; the protocol passes it as argument 1"),
    ],
)
def test_each_kind_of_mismatch_is_named(op, problem):
    line = signatures.mismatches(Wrong())[op]
    assert line.startswith(f"backend 'wrong': {op}(") and "does not match" in line, line
    assert problem in line and "\n" not in line, line


class Wider:
    """Accepts every call the protocols allow, and more: none of this is a mismatch."""

    name = "wider"

    def unavailable(self, device):
        return None

    def gelu_and_mul(self, inp, approximate="none"): ...  # renamed positional, option positional

    def silu_and_mul(self, *args, **kwargs): ...

    def rms_norm(self, x, weight, *, eps, out=None): ...  # an extra option with a default

    def attention(self, q, k, v, **options): ...

    def dpm_scheduler(self, *, num_train_timesteps=1000, **config): ...

    swiglu_step_and_mul = backends.NotImplementedOp("not here")
    situ_and_mul = max  # a builtin without a readable signature: not checked


def test_a_paged_attention_without_fp8_scales_matches_and_skips_its_fp8_cases():
    """k_scale / v_scale are optional capabilities (KV-FP8-READ): a bf16-only paged_attention of
    before them matches its protocol, and the fp8 read skips as not implemented; a missing
    required keyword (scale) is still a mismatch."""
    from conformance import test_kv_cache

    class NoFp8(NativeBackend):
        name = "no-fp8"

        def paged_attention(self, q, k_cache, v_cache, *, block_table, cu_seqlens_q, seq_lens,
                            sliding_window, softcap, sinks, scale):  # fmt: skip
            meta = dict(block_table=block_table, cu_seqlens_q=cu_seqlens_q, seq_lens=seq_lens)
            return super().paged_attention(q, k_cache, v_cache, **meta, sliding_window=sliding_window,
                                           softcap=softcap, sinks=sinks, scale=scale)  # fmt: skip

    class NoScale(NativeBackend):
        name = "no-scale"

        def paged_attention(self, q, k_cache, v_cache, *, block_table, cu_seqlens_q, seq_lens,
                            sliding_window, softcap, sinks):  # fmt: skip
            raise AssertionError("not called")

    assert signatures.op_mismatch(NoFp8(), "paged_attention") is None
    assert signatures.missing_keywords(NoFp8(), "paged_attention") == ["k_scale", "v_scale"]
    assert signatures.missing_keywords(NativeBackend(), "paged_attention") == []
    assert "no parameter 'scale'" in signatures.op_mismatch(NoScale(), "paged_attention")
    with pytest.raises(pytest.skip.Exception, match=r"^not implemented: backend 'no-fp8'.*k_scale, v_scale"):
        test_kv_cache._skip_without_fp8(NoFp8())


def test_wider_signatures_are_accepted():
    assert signatures.mismatches(Wider()) == {}


def test_start_folder_goes_first_once(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", ["/nowhere", *sys.path])
    assert signatures.start_folder_on_path(tmp_path) is True
    assert sys.path[0] == str(tmp_path.resolve())
    assert signatures.start_folder_on_path(tmp_path) is False and sys.path.count(str(tmp_path.resolve())) == 1


ACME = """
from backends.native import NativeBackend


class Acme(NativeBackend):
    name = "acme"

    def rms_norm(self, x, weight, epsilon=1e-6):  # the protocol says eps
        return super().rms_norm(x, weight, eps=epsilon)


BACKEND = Acme()
"""


def _plain_pytest(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """``pytest ARGS`` started in ``folder`` as the console script runs it: ``python -P`` keeps the
    folder off sys.path (``python -m pytest`` would put it there)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def test_plain_pytest_imports_the_module_and_fails_the_mismatched_op_once_each(tmp_path):
    """From the folder holding acme_kernels.py: the module imports, the load prints one line for
    rms_norm, each rms_norm case fails with that line (clause named, no TypeError), and the correct
    gemma_rms_norm passes."""
    (tmp_path / "acme_kernels.py").write_text(ACME)
    report = tmp_path / "report.json"
    proc = _plain_pytest(
        tmp_path, "--pyargs", "conformance.test_norms", "--backend-module", "acme_kernels",
        "--hypothesis-profile=ci", f"--opconform-json={report}",
        "-k", "test_rms_norm_matches or gemma_rms_norm_matches",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    line = (
        "backend 'acme': rms_norm(x, weight, epsilon=1e-06) does not match "
        "NormOps.rms_norm(x, weight, *, eps): no parameter 'eps'"
    )
    assert out.count(f"opconform: {line}") == 1, out  # at load time, once
    assert f"[NORM-RMS] {line}\n" in out, out  # the case's failure: that line alone
    assert "unexpected keyword argument" not in out and "During handling" not in out, out
    cases = {c["nodeid"].split("::")[-1]: c for c in json.loads(report.read_text())["results"]}
    assert {name: c["outcome"] for name, c in cases.items()} == {
        "test_rms_norm_matches_oracle[acme-cpu]": "failed",
        "test_gemma_rms_norm_matches_oracle[acme-cpu]": "passed",
    }, cases
    assert cases["test_rms_norm_matches_oracle[acme-cpu]"]["failure"]["clause"] == "NORM-RMS"


def _readme_quick_start() -> tuple[str, list[str]]:
    """README's example backend module (the block starting ``# acme_kernels.py``) and the words
    of its plain-pytest command, as a user pastes them."""
    import re
    import shlex

    readme = (REPO / "README.md").read_text()
    module = next(
        b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if b.startswith("# acme_kernels.py")
    )
    command = next(
        line.split("#")[0].strip()
        for block in re.findall(r"```sh\n(.*?)```", readme, re.S)
        for line in block.splitlines()
        if line.startswith("pytest ")
    )
    return module, shlex.split(command)


def test_readme_plain_pytest_command_works_as_written(tmp_path):
    """The README's module and plain-pytest command, pasted into a folder: the module imports from
    there and its ops get verdicts (its `...` bodies return None: a failure naming the op)."""
    module, command = _readme_quick_start()
    assert command[:4] == ["pytest", "--pyargs", "conformance", "--backend-module"], command
    (tmp_path / f"{command[4]}.py").write_text(module)
    report = tmp_path / "report.json"
    narrow = ["-k", "test_rms_norm_matches_oracle or test_geglu_matches_oracle", f"--opconform-json={report}"]
    proc = _plain_pytest(tmp_path, *command[1:], *narrow, "--hypothesis-profile=ci-noshrink")
    out = proc.stdout + proc.stderr
    assert "No module named" not in out and proc.returncode == 1, out
    outcomes = {c["nodeid"].split("::")[-1]: c["outcome"] for c in json.loads(report.read_text())["results"]}
    assert outcomes and set(outcomes.values()) == {"failed"}, outcomes
    assert {name.split("[")[0] for name in outcomes} == {
        "test_rms_norm_matches_oracle",
        "test_geglu_matches_oracle",
    }
