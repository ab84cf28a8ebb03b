"""The opconform command line: subcommand table, argument pass-through, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opconform import cli
from opconform.commands import run as run_command


def _args(*argv: str):
    return cli.build_parser("run").parse_args(["run", *argv])


def test_subcommands_come_from_the_table():
    """Each table entry is a module with HELP, add_arguments and run."""
    assert {"run", "merge", "diff", "mutants", "bench"} <= set(cli.COMMANDS)
    for name in cli.COMMANDS:
        module = cli.load_command(name)
        assert module.HELP and callable(module.add_arguments) and callable(module.run)


TORCHLESS = (
    "import sys; sys.modules['torch'] = None; from opconform.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_help_merge_and_diff_run_without_torch(tmp_path):
    """--help, merge and diff import no torch: they run where `import torch` fails."""
    import subprocess
    import sys

    document = {"schema": "opconform-results", "version": 2, "results": [
        {"nodeid": "t.py::test_x[native-cpu]", "outcome": "passed", "clauses": ["C"]}]}  # fmt: skip
    report = tmp_path / "r.json"
    report.write_text(json.dumps(document))
    for argv, code, words in (
        (["--help"], 0, "merge"),
        (["merge", str(report), str(report)], 0, "1 pass"),  # one case, not two
        (["diff", str(report), str(report)], 0, "no changes"),
    ):
        proc = subprocess.run([sys.executable, "-c", TORCHLESS, *argv], capture_output=True, text=True)
        assert proc.returncode == code and words in proc.stdout, (argv, proc.stdout, proc.stderr)


def test_run_passes_options_and_pytest_args_through(tmp_path, monkeypatch):
    """--backend/--device/--backend-module/--profile/-n and args after -- reach pytest."""
    args = _args("--backend", "native", "--device", "cpu", "--backend-module", "m:B", "--profile", "thorough",
                 "-n", "2", "--", "-k", "geglu", "-x")  # fmt: skip
    command = run_command.pytest_command(args, tmp_path / "r.json")
    assert command[1:5] == ["-m", "pytest", "--pyargs", "conformance"]
    expected = ["--backend=native", "--device=cpu", "--backend-module=m:B",
                "--hypothesis-profile=opconform-thorough"]  # fmt: skip
    assert set(expected + [f"--opconform-json={tmp_path / 'r.json'}"]) <= set(command)
    assert command[-5:] == ["-n", "2", "-k", "geglu", "-x"]
    default = run_command.pytest_command(_args(), tmp_path / "r.json")
    assert default[default.index("-n") + 1] == "1"  # one supervised worker: a crash is a case's
    real_find_spec = run_command.importlib.util.find_spec
    monkeypatch.setattr(
        run_command.importlib.util,
        "find_spec",
        lambda name: None if name == "xdist" else real_find_spec(name),
    )
    assert "no:xdist" in run_command.pytest_command(_args(), tmp_path / "r.json")


def test_bad_profile_is_a_usage_error(capsys):
    """An unknown --profile is rejected by the parser with the choices."""
    with pytest.raises(SystemExit) as exit_info:
        _args("--profile", "fast")
    assert exit_info.value.code == 2 and "invalid choice: 'fast'" in capsys.readouterr().err


def test_missing_expectations_path_is_an_error(tmp_path, capsys):
    """opconform run refuses a manifest path that does not exist, naming it."""
    assert cli.main(["run", "--expectations", str(tmp_path / "nope.toml"), "--out", str(tmp_path)]) == 2
    assert "nope.toml: no such file or directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "not a JSON report"),
        (json.dumps({"schema": "other"}), "not an opconform report"),
        (json.dumps({"schema": "opconform-results", "version": 99, "results": []}), "report version 99"),
    ],
)
def test_diff_and_merge_reject_bad_reports(tmp_path, capsys, content, words):
    """A file that is not a readable report is exit 2 with the file named."""
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert cli.main(["diff", str(bad), str(bad)]) == 2
    assert cli.main(["merge", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: {words}" in err


def test_ci_workflow_is_valid_and_its_tox_envs_exist():
    """conformance.yml parses; each matrix device runs a tox env that tox.ini defines."""
    import configparser
    from pathlib import Path

    yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse the workflow")
    root = Path(__file__).resolve().parent.parent
    workflow = yaml.safe_load((root / ".github/workflows/conformance.yml").read_text())
    devices = [entry["device"] for entry in workflow["jobs"]["device"]["strategy"]["matrix"]["include"]]
    assert devices == ["cpu", "cuda", "npu"] and "tox -e ${{ matrix.device }}" in str(workflow)
    assert workflow["jobs"]["merge"]["needs"] == "device"
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(root / "tox.ini")
    assert {f"testenv:{d}" for d in devices} | {"testenv:lint"} <= set(tox.sections())


def test_run_loads_the_plugin_by_name_from_an_uninstalled_checkout(tmp_path, monkeypatch):
    """Without the pytest11 entry point (a checkout on PYTHONPATH) the run passes
    -p conformance.harness.plugin.

    Found on the first CUDA host run: started outside the checkout, pytest loaded neither the entry
    point nor the checkout's conftest.py, so no report was written.
    """
    monkeypatch.setattr(run_command, "plugin_registered", lambda: False)
    command = run_command.pytest_command(_args(), tmp_path / "r.json")
    assert command[command.index("conformance.harness.plugin") - 1] == "-p"
    monkeypatch.setattr(run_command, "plugin_registered", lambda: True)
    assert "conformance.harness.plugin" not in run_command.pytest_command(_args(), tmp_path / "r.json")


def _report(tmp_path, name, outcomes):
    cases = [{"nodeid": f"t.py::test_{i}[native-cpu]", "outcome": o, "clauses": ["C"], "backend": "native",
              "device": "cpu"} for i, o in enumerate(outcomes)]  # fmt: skip
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"schema": "opconform-results", "version": 2, "results": cases}))
    return str(path)


def test_merge_of_one_column_twice_counts_each_case_once(tmp_path, capsys):
    """Two reports of native@cpu: a case in both is one case, the later report's; a disagreement
    is a warning naming both runs (it was 2x the passes: merge added the runs)."""
    first = _report(tmp_path, "first", ["passed", "passed", "failed"])
    second = _report(tmp_path, "second", ["passed", "passed", "passed"])
    assert cli.main(["merge", first, second]) == 0
    out = capsys.readouterr().out
    assert "native@cpu: conforms (3 pass)" in out, out
    assert f"t.py::test_2[native-cpu]: fail in {first}, pass in {second}" in out, out
    assert cli.main(["merge", second, first]) == 1
    assert "native@cpu: 1 MUST broken (1 fail, 2 pass)" in capsys.readouterr().out
    from opconform import render, report

    page = render.html_page(report.merge([report.load(first), report.load(second)], names=[first, second]))
    assert "<li>t.py::test_2[native-cpu]: fail in" in page and "<ul id='warnings'>" in page


def test_merge_with_an_input_that_lacked_a_requested_device_exits_3(tmp_path, capsys):
    """A run whose --device cuda was absent (its cases skipped, `run` exited 3) merged with a
    passing run was exit 0: merge now exits 3 naming that input, and the merge keeps the record."""
    cpu = _report(tmp_path, "cpu", ["passed"])
    cuda = tmp_path / "cuda.json"
    document = json.loads(Path(_report(tmp_path, "cuda", ["skipped"])).read_text())
    document["absent_devices"] = {"cuda": "torch.cuda.is_available() is False"}
    cuda.write_text(json.dumps(document))
    assert cli.main(["merge", cpu, str(cuda), "--out", str(tmp_path / "merged")]) == 3
    assert capsys.readouterr().err.splitlines() == [
        f"opconform merge: {cuda}: requested device(s) absent: cuda (torch.cuda.is_available() is False)"
    ]
    merged = str(tmp_path / "merged" / "report.json")
    assert cli.main(["merge", merged]) == 3  # a merge of that merge still says so
    assert cli.main(["merge", cpu, cpu]) == 0


def test_run_on_requested_absent_devices_exits_3(tmp_path):
    """--device npu without torch_npu (it was four collection errors from torch.device('npu')) and
    --device cuda without CUDA (it was all skipped, exit 0), asked for in one run: the cases skip
    with the reason, the report names each absent device, and the run exits 3 with one line."""
    import torch
    from report_runs import opconform

    devices = [d for d in ("npu", "cuda") if not (d == "cuda" and torch.cuda.is_available())]
    devices = [d for d in devices if not (d == "npu" and hasattr(torch, "npu"))]
    if not devices:
        pytest.skip("a cuda and an npu device may be present here")
    proc = opconform("run", "--backend", "native", *(f"--device={d}" for d in devices), "--profile", "ci",
                     "-n", "0", "--out", str(tmp_path), "--", "-k", "geglu_matches_oracle",
                     cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if "requested device(s) absent" in line]
    assert line.startswith("opconform run: requested device(s) absent: ") and all(
        f"{d} (" in line for d in devices
    ), proc.stderr
    assert "error" not in proc.stdout.lower().split("opconform summary")[0][-300:], proc.stdout
    document = json.loads((tmp_path / "report.json").read_text())
    assert sorted(document["absent_devices"]) == sorted(devices)
    for device in devices:
        cases = [r for r in document["results"] if r["device"] == device]
        assert cases and all(
            r["outcome"] == "skipped" and r["reason"].startswith(f"device {device}:") for r in cases
        )
        assert f"requested device {device} is absent" in proc.stdout


@pytest.mark.parametrize(
    "argv, words",
    [
        (["-n", "-3"], "argument -n: '-3': expected a number of workers"),
        (["-n", "many"], "argument -n: 'many': expected a number of workers"),
        (["--profile", "fast"], "argument --profile: invalid choice: 'fast'"),
        (["--timeout", "-1"], "argument --timeout: '-1': expected a finite number of seconds, 0 or more"),
        (["--timeout", "nan"], "argument --timeout: 'nan': expected a finite number of seconds"),
        (["--timeout", "inf"], "argument --timeout: 'inf': expected a finite number of seconds"),
        (["--timeout", "soon"], "argument --timeout: 'soon': expected a finite number of seconds"),
    ],
)
def test_bad_run_arguments_are_one_line_usage_errors(argv, words, capsys):
    """-n -3 was accepted (and handed to xdist); --timeout -1 reached SIGALRM's timer and failed
    every case of a correct backend with itimer_error: every bad argument is one line and exit 2."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", *argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and words in err and len(err.strip().splitlines()) == 1, err


def test_unwritable_out_is_a_one_line_usage_error(tmp_path, capsys):
    """--out under a file (it was a traceback from mkdir) is exit 2 naming the directory."""
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "out"
    report = _report(tmp_path, "one", ["passed"])
    assert cli.main(["run", "--out", str(out)]) == 2
    assert cli.main(["merge", report, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"opconform {c}: error: --out {out}: cannot write there: Not a directory" for c in ("run", "merge")
    ]


BROKEN_MODULE = "raise RuntimeError('the driver is gone')\n"
TYPO_MANIFEST = """backend = "nativ"

[[expect]]
clause = "ACT-GEGLU"
reason = "intermittent"
"""


def test_run_usage_errors_and_warnings_reach_the_user(tmp_path):
    """A backend module that raises on import was an INTERNALERROR: now exit 2 with one line naming
    the module and the exception; a manifest for an unknown backend was silently "not applicable":
    now a warning in the output and the report."""
    from report_runs import opconform

    (tmp_path / "broken_backend.py").write_text(BROKEN_MODULE)
    proc = opconform(
        "run", "--backend-module", "broken_backend", "-n", "0", "--out", str(tmp_path / "a"), cwd=tmp_path
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "INTERNALERROR" not in output, output[-3000:]
    assert "--backend-module broken_backend: importing it raised RuntimeError: the driver is gone" in output
    (tmp_path / "typo.toml").write_text(TYPO_MANIFEST)
    manifest = str(tmp_path / "typo.toml")
    proc = opconform("run", "--backend", "native", "--device", "cpu", "--expectations", manifest, "-n", "0",
                     "--out", str(tmp_path / "b"), "--", "-k", "geglu_matches_oracle",
                     cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = f"expectations {tmp_path / 'typo.toml'}: backend 'nativ' names no known backend"
    assert line in proc.stdout
    document = json.loads((tmp_path / "b" / "report.json").read_text())
    assert any(line in w for w in document["warnings"])
    assert [e["status"] for e in document["expectations"] if e["backend"] == "nativ"] == ["unknown backend"]
