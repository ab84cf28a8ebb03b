"""A first verdict fast (conformance/harness/stream.py, ordering.py, failfast.py):
the run order the spec's clause graph gives, the streamed broken-clause lines, and
``opconform run --first-failure``.

One ``opconform run --first-failure`` of the four-bug module (tests/fourbug_backend.py), in the
ci profile without shrinking (the same examples every run; shrinking would triple its time) on
its declared clauses (``--focus-declared-clauses``, to keep it short), through one supervised
xdist worker as a user's run: the controller streams.
Timing is not asserted here: benchmarks/first_verdict.py measures it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import fourbug_backend
import pytest
from suite_runner import REPO, produced_once

from conformance import spec_index
from conformance.harness import failfast, ordering, stream
from conformance.results import Outcome
from opconform import report
from opconform.commands import run as run_command

TESTS = Path(__file__).resolve().parent


def _run(root: Path) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("PYTEST_XDIST_WORKER", None)
    command = [sys.executable, "-m", "opconform.cli", "run", "--backend-module", "fourbug_backend",
               "--device", "cpu", "--first-failure", "--out", str(root / "out"),
               "--", "--focus-declared-clauses", "--hypothesis-profile=opconform-ci-noshrink"]  # fmt: skip
    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    return {
        "returncode": proc.returncode,
        "stdout": proc.stdout,
        "stderr": proc.stderr,
        "out": str(root / "out"),
    }


@pytest.fixture(scope="module")
def fourbug(tmp_path_factory):
    run = produced_once(tmp_path_factory, "opconform-fourbug", _run)
    path = Path(run["out"]) / "report.json"
    assert path.exists(), run["stdout"][-3000:] + run["stderr"][-3000:]
    streamed = [line for line in run["stdout"].splitlines() if line.startswith(stream.PREFIX)]
    return SimpleNamespace(**run, document=report.load(path), streamed=streamed)


def test_failures_bring_no_patch_of_the_suites_source(fourbug):
    """A failing case's example is in its record: Hypothesis's @example patch of the suite's own
    test module is not built, so libcst's DeprecationWarnings no longer fill the user's summary."""
    assert fourbug.returncode == 1 and "failed" in fourbug.stdout, fourbug.stdout[-2000:]
    assert "libcst" not in fourbug.stdout + fourbug.stderr, fourbug.stdout[-3000:]
    assert not list(Path(fourbug.out).parent.rglob("*.patch"))


def test_streamed_lines_name_each_bug_by_its_pinning_clause(fourbug):
    """Each of the four bugs' first streamed line names the clause that pins it (not an echo such
    as ACT-GEGLU's tolerance noise), with op, backend@device, got/expected and the example; each
    broken clause is streamed once."""
    output = fourbug.stdout[-3000:] + fourbug.stderr[-2000:]
    assert fourbug.returncode == 1, output  # a conformance failure, not 4 "incomplete"
    first = {}
    for line in fourbug.streamed:
        clause, op, _where = line.removeprefix(stream.PREFIX + " ").partition(": ")[0].split(" ")
        first.setdefault(op, clause)
    wrong = {
        op: first.get(op)
        for op, pinning in fourbug_backend.ROOT_CAUSES.items()
        if first.get(op) not in pinning
    }
    assert not wrong, (wrong, fourbug.streamed)
    clauses = [line.removeprefix(stream.PREFIX + " ").partition(" ")[0] for line in fourbug.streamed]
    assert len(clauses) == len(set(clauses)), fourbug.streamed
    eps = next(line for line in fourbug.streamed if "NORM-EPS" in line)
    # The decisive values first: got and expected right after clause, op and backend@device.
    assert eps.startswith(f"{stream.PREFIX} NORM-EPS rms_norm fourbug@cpu: got "), eps
    assert "expected " in eps and "eps=" in eps and len(eps) <= stream.LINE_LIMIT, eps
    assert "smallest example: recipe=NormRecipe(shape=" in eps and "backend=" not in eps, eps
    assert "op=" not in eps and "# or any other" not in eps and "[NORM-EPS]" not in eps, eps
    # Streamed the moment each failed: before pytest's last line and opconform's summary.
    assert fourbug.stdout.index(fourbug.streamed[-1]) < fourbug.stdout.index("opconform summary"), output


def test_first_failure_stops_each_broken_clause_and_runs_the_rest(fourbug):
    """One failed case per clause; the rest of a broken clause's cases are skipped with the reason;
    clauses that hold (ACT-ERRORS) still ran."""
    cases = fourbug.document["results"]
    failed = [c["failure"]["clause"] for c in cases if c["outcome"] == Outcome.FAILED.value]
    assert failed and len(failed) == len(set(failed)), failed
    assert any("(--opconform-first-failure)" in (c.get("reason") or "") for c in cases)
    assert any("ACT-ERRORS" in c["clauses"] and c["outcome"] == "passed" for c in cases)


def test_cases_ran_in_the_order_of_the_rule(fourbug):
    """In the run's one worker the cases started in rank order (pinning, ordinary, SHOULD only)."""
    clauses = spec_index.load_clauses()
    ran = sorted((c for c in fourbug.document["results"] if c["when"] == "call"), key=lambda c: c["start"])
    ranks = [ordering.rank(c["clauses"], clauses) for c in ran]
    order = [(c["nodeid"], r) for c, r in zip(ran, ranks, strict=True)]
    assert ranks == sorted(ranks) and {0, 1, 3} <= set(ranks), order


def test_rank_rule_on_the_spec():
    """The rule read from spec/: a MUST clause with *Refines:* first, then the other direct MUST
    clauses, then metamorphic and tie clauses, SHOULD clauses (every -ERRORS one) last."""
    clauses = spec_index.load_clauses(str(REPO / "spec"))
    assert clauses["ACT-GEGLU-MODES"].refines == ("ACT-GEGLU",)
    ranked = ("ACT-GEGLU-MODES", "ACT-GEGLU", "PREFILL-DECODE", "MOE-TIES", "ACT-ERRORS")
    assert [ordering.rank([c], clauses) for c in ranked] == [0, 1, 2, 2, 3]
    assert ordering.rank(["ATTN-FLOAT-MASK", "MASK-DTYPE"], clauses) == 1
    assert ordering.rank(["SERVE", "SERVE-PAGED"], clauses) == 0


def _item(name, clauses, suite=True):
    marks = [SimpleNamespace(args=tuple(clauses))] if clauses else []
    return SimpleNamespace(name=name, suite=suite, iter_markers=lambda _name, marks=marks: iter(marks))


def test_order_is_stable_and_leaves_other_items_in_place():
    clauses = spec_index.load_clauses(str(REPO / "spec"))
    items = [
        _item("errors", ["ACT-ERRORS"]),
        _item("own", [], suite=False),
        _item("geglu", ["ACT-GEGLU"]),
        _item("modes", ["ACT-GEGLU-MODES"]),
        _item("swiglu", ["ACT-SWIGLU"]),
        _item("eps", ["NORM-EPS"]),
    ]
    ordering.order(items, clauses, lambda item: item.suite)
    assert [i.name for i in items] == ["modes", "own", "eps", "geglu", "swiglu", "errors"]


def test_spec_refining_an_unknown_clause_is_an_error(tmp_path):
    (tmp_path / "a.md").write_text("### X-ONE: one\n*Level:* MUST.\n*Refines:* X-NONE.\n\ntext\n")
    with pytest.raises(ValueError, match=r"a\.md:1: X-ONE \*Refines:\* unknown clause\(s\) \['X-NONE'\]"):
        spec_index.load_clauses(str(tmp_path))


def test_example_line_is_one_line_without_backend_and_device():
    exc = AssertionError("boom")
    exc.__notes__ = ["Falsifying example: test_x(\n    backend=<B object>,\n    device=device(type='cpu'),\n"
                 "    recipe=R(shape=(2, 3), dtype=torch.float32),  # or any other generated value\n"
                 "    approximate='none',\n)"]  # fmt: skip
    group = AssertionError("several")  # an exception group's shape, without needing Python 3.11
    group.exceptions = (exc,)
    assert stream.example_line(group) == "recipe=R(shape=(2, 3), dtype=torch.float32), approximate='none'"
    assert stream.example_line(AssertionError("no notes")) is None


def test_line_names_clause_op_backend_device_then_the_relation():
    """``opconform: FAIL CLAUSE op backend@device: relation; context; smallest example``, cut at 200."""
    message = ("[NORM-EPS] rms_norm on backend 'b' @ cpu, eps=1e-06: out: 1 of 4 elements outside "
               "tolerance (dtype torch.float32, shape (2, 2), rtol 1.3e-06, atol 1e-05)")  # fmt: skip
    facts = {"clause": "NORM-EPS", "op": "rms_norm", "backend": "b", "device": "cpu",
             "relation": "got -1, expected -0.6 at (0, 1)", "context": stream.context_of(message),
             "example": "recipe=R()"}  # fmt: skip
    assert stream.line(facts) == (
        "opconform: FAIL NORM-EPS rms_norm b@cpu: got -1, expected -0.6 at (0, 1); eps=1e-06: out "
        "(float32 (2, 2)); smallest example: recipe=R()"
    )
    long = stream.line({**facts, "example": "x" * 300})
    assert len(long) == stream.LINE_LIMIT and long.endswith("...") and "got -1" in long


def test_first_failure_skips_only_clauses_broken_on_that_backend_and_device():
    class Config:
        stash = {failfast.BROKEN: {("b", "cpu", "NORM-EPS")}}

        @staticmethod
        def getoption(name, default=None):
            return name == "opconform_first_failure"

    def item(backend, device, *clauses):
        params = {"backend": SimpleNamespace(name=backend), "device": SimpleNamespace(type=device)}
        return SimpleNamespace(config=Config, callspec=SimpleNamespace(params=params),
                               iter_markers=lambda _name: iter([SimpleNamespace(args=clauses)]))  # fmt: skip

    assert "NORM-EPS already failed for backend 'b' on cpu" in failfast.clause_skip_reason(
        item("b", "cpu", "NORM-EPS")
    )
    assert failfast.clause_skip_reason(item("b", "cuda", "NORM-EPS")) is None
    assert failfast.clause_skip_reason(item("c", "cpu", "NORM-EPS")) is None
    assert failfast.clause_skip_reason(item("b", "cpu", "NORM-EPS", "NORM-RMS")) is None


def test_run_option_maps_to_the_plugin_option(tmp_path):
    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    args = parser.parse_args(["--first-failure"])
    assert "--opconform-first-failure" in run_command.pytest_command(args, tmp_path / "r.json")
    assert "--opconform-first-failure" not in run_command.pytest_command(
        parser.parse_args([]), tmp_path / "r.json"
    )


def test_report_opens_each_bug_with_its_pinning_clause(fourbug):
    """report.md lists the MUST failures by root cause: each bug's op, its first failure under the
    clause that pins it, with its example; each failure once (its rerun line appears once)."""
    text = (Path(fourbug.out) / "report.md").read_text()
    assert "MUST failures (" in text, text
    causes = text[text.index("MUST failures (") :]
    for op, pinning in fourbug_backend.ROOT_CAUSES.items():
        entry = causes.split(f"- fourbug@cpu {op}:", 1)
        assert len(entry) == 2, (op, causes)
        lead = entry[1].split("\n", 2)[1]
        assert any(f"[{clause}]" in lead for clause in pinning), (op, lead)
        assert "example:" in entry[1].split("\n- fourbug@cpu", 1)[0], entry[1]
    reruns = [line for line in text.splitlines() if "rerun:" in line]
    assert len(reruns) == len(set(reruns)) == len(report.failures(fourbug.document)), reruns
