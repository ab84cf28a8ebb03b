"""Export and judge (docs/capture.md, Export): golden cases in the Ascend C samples' raw .bin
convention or safetensors, a C harness that reads one and is judged, a wrong harness caught
under the op's clause, and bad files one line each without losing the other cases."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from conformance.results import Outcome
from opconform import cli
from opconform.capture.export import export_cases
from opconform.capture.golden import judge_outputs
from opconform.capture.ops import REPLAY_OPS

HARNESS = Path(__file__).resolve().parent / "data" / "rms_norm_harness.c"


def _main(argv):
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


def _write_outputs(cases: Path, outputs: Path, compute) -> None:
    """A Python stand-in harness: reads each case's .bin inputs as raw float32, writes output_0.bin."""
    for folder in sorted(cases.iterdir()):
        side = json.loads((folder / "case.json").read_text())
        inputs = {
            n: torch.frombuffer(bytearray((folder / m["file"]).read_bytes()), dtype=torch.float32).reshape(
                m["shape"]
            )
            for n, m in side["inputs"].items()
        }
        (outputs / folder.name).mkdir(parents=True, exist_ok=True)
        out = compute(inputs, side["options"]).contiguous()
        (outputs / folder.name / "output_0.bin").write_bytes(out.numpy().tobytes())


def test_exported_bin_cases_round_trip_and_a_wrong_output_fails(tmp_path):
    export_cases("new_gelu", out=tmp_path / "cases", fmt="bin", cases=3)
    side = json.loads((tmp_path / "cases" / "case_0000" / "case.json").read_text())
    assert side["clause"] == "ACT-GELU-VARIANTS" and side["inputs"]["x"]["shape"] == [4, 64]
    golden = (tmp_path / "cases" / "case_0000" / "golden_0.bin").read_bytes()
    assert len(golden) == 4 * 64 * 4  # headerless float32, C order
    _write_outputs(
        tmp_path / "cases",
        tmp_path / "right",
        lambda i, o: torch.nn.functional.gelu(i["x"], approximate="tanh"),
    )
    document, problems = judge_outputs(tmp_path / "cases", tmp_path / "right")
    assert problems == [] and {c.outcome for c in document.results} == {Outcome.PASSED}
    # TOL-STATISTICS: each judged case keeps its statistics, a failure its failing comparison's.
    assert {c.statistics["dtypes"]["float32"]["elements"] for c in document.results} == {4 * 64}
    _write_outputs(tmp_path / "cases", tmp_path / "wrong", lambda i, o: torch.nn.functional.gelu(i["x"]))
    document, _ = judge_outputs(tmp_path / "cases", tmp_path / "wrong")
    assert [c.failure.clause for c in document.results] == ["ACT-GELU-VARIANTS"] * 3
    for case in document.results:
        assert case.statistics["dtypes"]["float32"]["max_abs_error"] == case.failure.largest_abs_error


def test_safetensors_export_from_a_capture(tmp_path):
    from opconform.capture import Capture

    with Capture(tmp_path / "cap") as cap:
        gelu = cap.wrap(torch.nn.functional.silu, "new_gelu", lambda x: {"x": x}, name="act")
        gelu(torch.randn(3, 5).t())  # a transposed view: exported contiguous
    written = export_cases(
        "new_gelu", out=tmp_path / "cases", fmt="safetensors", from_capture=tmp_path / "cap"
    )
    side = json.loads((written[0] / "case.json").read_text())
    assert side["origin"] == {"capture": str(tmp_path / "cap"), "layer": "act", "call": 0}
    assert side["inputs"]["x"]["shape"] == [5, 3] and (written[0] / "case.safetensors").exists()


def test_bad_case_files_are_one_line_each_and_lose_no_other_case(tmp_path, capsys):
    export_cases("rms_norm", out=tmp_path / "cases", fmt="bin", cases=4)
    row = REPLAY_OPS["rms_norm"]
    _write_outputs(tmp_path / "cases", tmp_path / "out", lambda i, o: row.expected(i, o)[0].float())
    cases = sorted((tmp_path / "cases").iterdir())
    (tmp_path / "out" / cases[0].name / "output_0.bin").write_bytes(b"\0" * 10)  # truncated
    (tmp_path / "out" / cases[1].name / "output_0.bin").unlink()  # missing
    side = json.loads((cases[2] / "case.json").read_text())
    side["inputs"]["x"]["dtype"] = "float17"  # a wrong dtype in a sidecar
    (cases[2] / "case.json").write_text(json.dumps(side))
    assert _main(["judge", str(tmp_path / "cases"), "--outputs", str(tmp_path / "out")]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 3 and "Traceback" not in captured.err
    assert "output_0.bin: 10 bytes" in lines[0] and "truncated" in lines[0]
    assert "output_0.bin: missing" in lines[1] and "unknown dtype 'float17'" in lines[2]
    assert "NORM-RMS" in captured.out and "pass" in captured.out  # the fourth case was judged
    assert _main(["judge", str(tmp_path / "nowhere"), "--outputs", str(tmp_path)]) == 2
    assert "no exported case folders" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, words",
    [(["--op", "write_kv_cache"], "--op write_kv_cache: not exportable"),
     (["--op", "select_experts"], "--op select_experts: not exportable: MOE-SELECT"),
     (["--op", "rms_norm", "--clause", "ATTN"], "--clause ATTN: op rms_norm is judged under NORM-RMS"),
     (["--op", "rms_norm", "--cases", "0"], "--cases 0"),
     (["--op", "rms_norm", "--dtype", "int8"], "--dtype int8")],
)  # fmt: skip
def test_export_bad_arguments_are_one_line(tmp_path, capsys, argv, words):
    assert _main(["export", *argv, "--format", "bin", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_the_c_harness_reads_an_exported_case_and_is_judged(tmp_path):
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler (gcc or cc) on this machine: the C harness cannot be built")
    assert (
        _main(
            [
                "export",
                "--op",
                "rms_norm",
                "--cases",
                "2",
                "--format",
                "bin",
                "--out",
                str(tmp_path / "cases"),
            ]
        )
        == 0
    )
    for variant, flags in (("right", []), ("gemma", ["-DGEMMA"])):
        binary = tmp_path / f"harness_{variant}"
        subprocess.run([compiler, "-O1", *flags, "-o", str(binary), str(HARNESS), "-lm"], check=True)
        for folder in sorted((tmp_path / "cases").iterdir()):
            side = json.loads((folder / "case.json").read_text())
            rows, width = side["inputs"]["x"]["shape"]
            out = tmp_path / variant / folder.name
            out.mkdir(parents=True)
            done = subprocess.run(
                [str(binary), str(folder), str(out), str(rows), str(width), repr(side["options"]["eps"])],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            assert done.stdout.startswith("0 of ") == (variant == "right"), done.stdout
        document, problems = judge_outputs(tmp_path / "cases", tmp_path / variant, source=f"c-{variant}")
        outcomes = [c.outcome for c in document.results]
        assert problems == []
        if variant == "right":
            assert outcomes == [Outcome.PASSED] * 2
        else:
            assert [c.failure.clause for c in document.results] == ["NORM-RMS"] * 2
