"""Replay's verdicts are the kernel's (docs/capture.md): an op the backend lacks is not
implemented, an absent device is exit 3 in one line, a wrong capture mapping is refused at its
first call, a backend whose ``unavailable`` raises is one line about it, and each failure's rerun
line replays exactly that call."""

from __future__ import annotations

import json
import shlex

import pytest
import torch
import torch.nn.functional as F

from conformance.devices import absent_reason
from opconform import cli
from opconform.capture import Capture, read_index


def _main(argv):
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


def _capture(folder, calls=2):
    """Calls of new_gelu (right, tanh) and rms_norm, recorded on the host."""
    with Capture(folder, source="port") as cap:
        gelu = cap.wrap(lambda x: F.gelu(x, approximate="tanh"), "new_gelu", lambda x: {"x": x}, name="act")
        norm = cap.wrap(
            lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, "rms_norm",
            lambda x, w: {"x": x, "weight": w, "eps": 1e-6}, name="norm",
        )  # fmt: skip
        for _ in range(calls):
            x = torch.randn(4, 16) * 3
            gelu(x), norm(x, torch.ones(16))
    return folder


def _report(folder) -> list[dict]:
    return json.loads((folder / "report.json").read_text())["results"]


def test_an_op_the_backend_lacks_is_not_implemented_not_a_failure(tmp_path, capsys):
    """rms_norm on a backend without it: n/i, and the run conforms (exit 0)."""
    argv = ["replay", str(_capture(tmp_path / "cap")), "--backend", "replay_backends:GELU_ONLY"]
    assert _main([*argv, "--out", str(tmp_path / "rep")]) == 0
    outcomes = {(r["op"], r["outcome"]) for r in _report(tmp_path / "rep")}
    assert outcomes == {("new_gelu", "passed"), ("rms_norm", "not implemented")}
    assert "AttributeError" not in capsys.readouterr().out


def _absent_devices() -> list[str]:
    """Devices absent on any machine (an index past the count), and the types absent on this one."""
    return ["cuda:99"] + [kind for kind in ("cuda", "npu") if absent_reason(kind)]


@pytest.mark.parametrize("device", _absent_devices())
def test_an_absent_device_is_exit_3_with_one_line(tmp_path, capsys, device):
    """Not a FAIL per call: one line naming the device, and no report."""
    argv = ["replay", str(_capture(tmp_path / "cap")), "--backend", "native", "--device", device]
    assert _main(argv) == 3
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"opconform replay: requested device absent: {device} ("), err


@pytest.mark.parametrize(
    "argv, words",
    [(["--device", "gpu", "--backend", "native"], "--device gpu: expected one of cpu, cuda, npu"),
     (["--device", "cpu"], "--device cpu: only used with --backend"),
     (["--case", "replay::act::call9::new_gelu"], "--case replay::act::call9::new_gelu: no call of capture")],
)  # fmt: skip
def test_bad_replay_options_are_one_line(tmp_path, capsys, argv, words):
    """A malformed device, --device without --backend and an unknown case id: exit 2, one line."""
    assert _main(["replay", str(_capture(tmp_path / "cap")), *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and len(err) == 1 and words in err[0], err


def test_a_backend_whose_unavailable_raises_is_one_line_about_the_backend(tmp_path, capsys):
    """Not a FAIL of every call (nor a traceback): the backend and its error, exit 2."""
    argv = ["replay", str(_capture(tmp_path / "cap")), "--backend", "replay_backends:BROKEN_PROBE"]
    assert _main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and len(err) == 1, captured
    assert "backend 'broken-probe': its unavailable(cpu) raised AttributeError" in err[0], err


@pytest.mark.parametrize("kind", ["attach", "wrap"])
def test_a_mapping_naming_a_wrong_argument_is_refused_at_the_first_call(tmp_path, kind):
    """``input`` for new_gelu's ``x``: one line naming the key when the model first calls it."""
    with Capture(tmp_path) as cap:
        if kind == "wrap":
            call = cap.wrap(F.gelu, "new_gelu", lambda x: {"input": x}, name="act")
        else:
            call = cap.attach(torch.nn.GELU(), "new_gelu", lambda m, a, k: {"input": a[0]}, name="act")
        with pytest.raises(TypeError) as refused:
            call(torch.randn(2, 4))
    assert str(refused.value) == (
        "mapping for 'act': new_gelu has no argument 'input'; "
        "the mapping must give new_gelu(x) by these names"
    )
    assert read_index(tmp_path)[1] == []


def test_a_mapping_leaving_out_an_argument_without_default_is_refused(tmp_path):
    """rms_norm without eps would be a TypeError FAIL of every call at replay."""
    with Capture(tmp_path) as cap:
        norm = cap.wrap(lambda x, w: x * w, "rms_norm", lambda x, w: {"x": x, "weight": w}, name="norm")
        with pytest.raises(
            TypeError, match="mapping for 'norm': argument 'eps' of rms_norm\\(x, weight, eps\\)"
        ):
            norm(torch.randn(2, 4), torch.ones(4))


def test_each_replay_failure_prints_a_rerun_line_that_replays_exactly_that_call(tmp_path, capsys):
    """Every failure has a rerun line; run as printed, it judges that one call and it fails again."""
    argv = ["replay", str(_capture(tmp_path / "cap")), "--backend", "replay_backends:ERF_GELU"]
    assert _main(argv) == 1
    reruns = [
        line.split("rerun: ", 1)[1] for line in capsys.readouterr().out.splitlines() if "rerun: " in line
    ]
    assert len(reruns) == 2, reruns  # the two new_gelu calls; rms_norm is n/i
    for i, rerun in enumerate(reruns):
        words = shlex.split(rerun)
        assert words[:2] == ["opconform", "replay"] and words[-2:] == [
            "--case",
            f"replay::act::call{i}::new_gelu",
        ]
        out = tmp_path / f"rerun{i}"
        assert _main([*words[1:], "--out", str(out)]) == 1
        [case] = _report(out)
        assert case["nodeid"] == words[-1] and case["outcome"] == "failed"
        assert case["failure"]["clause"] == "ACT-GELU-VARIANTS" and case["failure"]["rerun"] == rerun
