"""The CLI's promises (docs/reports.md, exit statuses): bad input is one line on stderr,
``opconform COMMAND: error: ...`` naming the argument, exit 2, found before the work starts;
``diff | head`` ends quietly; an empty run says so with its own status; an absent --device is 3."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from opconform import cli
from opconform.commands import EXIT_EMPTY, pytest_usage_line
from opconform.commands import run as run_command


def _main(argv):
    """cli.main's status, also when argparse rejects the arguments (SystemExit)."""
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


def _one_line(capsys, command: str, *words: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"opconform {command}: error: "), err
    assert all(w in lines[0] for w in words), err
    return lines[0]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--out", "/proc/nope"], ["--out /proc/nope: cannot write there"]),
        (["--family", "nosuch"], ["--family: unknown nosuch", "known: activations"]),
        (["--jobs", "0"], ["--jobs", "'0'"]),
        (["-j", "many"], ["--jobs", "'many'"]),
        (["--false-alarm-seeds", "-1"], ["--false-alarm-seeds", "'-1'"]),
    ],
)
def test_mutants_bad_arguments_exit_2_before_any_batch(argv, words, capsys, monkeypatch):
    """--out /proc/nope printed a traceback after 45 s of batches; --family nosuch and --jobs 0
    exited 1: each is exit 2, one line, and no pytest process starts."""
    from opconform import mutation

    monkeypatch.setattr(mutation, "run_batch", lambda *a, **k: pytest.fail("a batch started"))
    assert _main(["mutants", *argv]) == 2
    _one_line(capsys, "mutants", *words)


def test_mutants_pytest_arguments_refused_are_one_line(capsys):
    """`mutants -- --nosuchflag` was a RuntimeError traceback with pytest's output: pytest's usage
    error (exit 4, no results) is exit 2 with pytest's one line."""
    assert _main(["mutants", "--family", "norms", "--jobs", "1", "--", "--nosuchflag"]) == 2
    _one_line(capsys, "mutants", "pytest arguments: unrecognized arguments: --nosuchflag")


def test_pytest_usage_line_reads_both_forms():
    argparse_form = "ERROR: usage: __main__.py [opts]\n__main__.py: error: unrecognized arguments: -z\n  x\n"
    assert pytest_usage_line(argparse_form) == "unrecognized arguments: -z"
    pytest_9_2_form = (
        "ERROR: usage: python -m pytest [opts]\npython -m pytest: error: unrecognized arguments: -z\n"
    )
    assert pytest_usage_line(pytest_9_2_form) == "unrecognized arguments: -z"
    plugin_form = "ERROR: --hypothesis-profile: unknown profile 'x'; known: [...]\n"
    assert pytest_usage_line(plugin_form) == "--hypothesis-profile: unknown profile 'x'; known: [...]"
    assert pytest_usage_line("some warning\n") is None


def test_diff_with_a_third_operand_names_diff(capsys):
    """`diff a b c` said `opconform: error:`."""
    assert _main(["diff", "a", "b", "c"]) == 2
    _one_line(capsys, "diff", "unrecognized arguments: c")


def test_diff_into_a_closed_pipe_ends_quietly(tmp_path):
    """`opconform diff A B | head` raised BrokenPipeError: the rest of the output goes nowhere, no
    traceback, and diff exits with its own status (0: the changes are fixes)."""
    cases = [{"nodeid": f"t.py::test_{i}[native-cpu]", "clauses": ["C"], "backend": "native", "device": "cpu"}
             for i in range(3000)]  # fmt: skip
    for name, outcome in (("old", "failed"), ("new", "passed")):
        document = {"schema": "opconform-results", "version": 2,
                    "results": [{**c, "outcome": outcome} for c in cases]}  # fmt: skip
        (tmp_path / f"{name}.json").write_text(json.dumps(document))
    command = [sys.executable, "-c", "import sys; from opconform.cli import main; sys.exit(main())",
               "diff", str(tmp_path / "old.json"), str(tmp_path / "new.json")]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("fixes (3000)")
    proc.stdout.close()  # as `head -1` does
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 0 and stderr == "", stderr


def _fake_pytest(exitstatus: int):
    def run_pytest(command):
        path = next(a.split("=", 1)[1] for a in command if a.startswith("--opconform-json="))
        document = {"schema": "opconform-results", "version": 2, "results": [], "exitstatus": exitstatus}
        with open(path, "w") as handle:
            json.dump(document, handle)
        return exitstatus, run_command.StderrRelay(iter([]))

    return run_pytest


@pytest.mark.parametrize(
    "exitstatus, extra, code, words",
    [
        (0, ["--collect-only"], 0, "collect-only: the cases were listed, none ran"),
        (0, ["--co"], 0, "collect-only"),
        (5, ["-k", "nosuch"], EXIT_EMPTY, "no case ran (pytest exit 5"),
    ],
)
def test_run_of_no_case_is_not_a_conformance_failure(tmp_path, monkeypatch, capsys, exitstatus, extra,
                                                     code, words):  # fmt: skip
    """`run -- --collect-only` exited 1 ("conformance failure") on an empty matrix: collect-only is
    0, a run that ran no case is status 5, each with one line instead of an empty matrix."""
    monkeypatch.setattr(run_command, "run_pytest", _fake_pytest(exitstatus))
    assert cli.main(["run", "-n", "0", "--out", str(tmp_path), "--", *extra]) == code
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [captured.err.strip()] and words in captured.err
    assert "clause" not in captured.out  # no empty matrix


def test_run_collect_only_exits_0(tmp_path):
    """The real thing: pytest's --collect-only through `opconform run` is exit 0."""
    from report_runs import opconform

    proc = opconform("run", "--backend", "native", "--device", "cpu", "-n", "0", "--out", str(tmp_path),
                     "--", "--collect-only", "-k", "geglu_matches_oracle", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "collect-only" in proc.stderr


def test_run_argument_pytest_refuses_is_one_line(tmp_path):
    """An unknown --backend is decided by the plugin inside pytest (exit 4): it was pytest's ERROR
    line and a second line of opconform's; now it is the one `opconform run: error:` line."""
    from report_runs import opconform

    proc = opconform("run", "--backend", "nosuch", "-n", "0", "--out", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if "opconform" in line or "ERROR" in line]
    assert len(lines) == 1, lines
    assert lines[0].startswith("opconform run: error: --backend: unknown backend"), lines


def test_run_device_outside_the_known_types_is_one_line(capsys):
    assert _main(["run", "--device", "tpu"]) == 2
    _one_line(capsys, "run", "--device", "'tpu'")
    # Its syntax is conformance.devices.parse's (DEV-CARDS), not a copy of the type list.
    assert _main(["run", "--device", "npu:x"]) == 2
    _one_line(capsys, "run", "--device", "npu:x: card indices are whole numbers")


def test_bench_on_an_absent_device_exits_3_before_any_work(capsys, monkeypatch):
    """`bench --device npu` without an NPU exited 0 after 90 identical skip rows."""
    from conformance.devices import absent_reason
    from opconform.commands import bench as bench_command

    if absent_reason("npu") is None:
        pytest.skip("an NPU is present here")
    monkeypatch.setattr(bench_command, "run_bench", lambda **k: pytest.fail("the bench started"))
    assert cli.main(["bench", "--quick", "--device", "npu"]) == 3
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        f"opconform bench: requested device(s) absent: npu ({absent_reason('npu')})"
    ]
    assert captured.out == ""


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--out", "/proc/nope"], ["--out /proc/nope: cannot write there"]),
        (["--chart", "/no/such/dir/c.png"], ["--chart"]),
        (["--dtype", "int8"], ["--dtype", "'int8'"]),
        (["--budget", "nan"], ["--budget", "'nan'"]),
    ],
)
def test_bench_bad_arguments_are_one_line(argv, words, capsys):
    assert _main(["bench", *argv]) == 2
    _one_line(capsys, "bench", *words)


def test_merge_and_diff_unreadable_reports_say_error(tmp_path, capsys):
    assert _main(["diff", str(tmp_path / "nope.json"), str(tmp_path / "nope.json")]) == 2
    _one_line(capsys, "diff", "nope.json")
    assert _main(["merge"]) == 2
    _one_line(capsys, "merge", "REPORT.json")
