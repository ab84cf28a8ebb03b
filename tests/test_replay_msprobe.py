"""``opconform replay --from msprobe``: a dump msprobe itself made on CPU (tests/msprobe_dumps.py)
replays with exactly the planted kernel's calls failing under its clause, every other API counted
and listed, and a tensor file that is not plain tensor data refused with one line
(spec/ascend.md, MSPROBE-DUMP, MSPROBE-MAP).

msprobe (``pip install mindstudio-probe``, extra ``msprobe``) and transformers (extra ``peers``)
are optional: without them these tests skip with the reason. The dump is made once per run in a
subprocess (msprobe's debugger is a process-wide singleton that patches torch), shared by the
xdist workers through a lock file.
"""

from __future__ import annotations

import fcntl
import html
import json
import os
import pickle
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch

from conformance.results import Outcome
from opconform import cli, render
from opconform import report as rep
from opconform.capture.msprobe_map import MAPPINGS
from opconform.capture.msprobe_replay import replay_msprobe

sys.path.insert(0, str(Path(__file__).parent))
import msprobe_dumps  # noqa: E402 (tests/ is no package)

MISSING = [name for name in ("msprobe", "transformers") if find_spec(name) is None]
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"{' and '.join(MISSING)} not installed (pip install -e '.[msprobe,peers]')"
)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def dump(tmp_path_factory, worker_id) -> Path:
    """The dump folder (msprobe's dump_path), made once for every xdist worker of the run."""
    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent
    folder = shared / "msprobe-dump"
    with open(shared / "msprobe-dump.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "msprobe-dump.done").exists():
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
            made = subprocess.run(
                [sys.executable, str(Path(msprobe_dumps.__file__)), str(folder)],
                cwd=shared, env=env, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert made.returncode == 0, made.stderr[-3000:]
            (shared / "msprobe-dump.done").touch()
    return folder


@pytest.fixture(scope="module")
def replayed(dump) -> tuple:
    """``replay_msprobe(dump)`` of the unchanged dump (document, problems, not judged), replayed once
    for the tests that read it (about 0.25 CPU-s a replay)."""
    return replay_msprobe(dump)


def _records(folder: Path) -> dict:
    (path,) = folder.rglob("dump.json")
    return json.loads(path.read_text())["data"]


def _by_record(document) -> dict:
    return {case.nodeid.rsplit("::", 1)[1]: case for case in document.results}


def test_the_planted_kernel_fails_exactly_its_calls_under_its_clause(dump, replayed):
    document, problems, not_judged = replayed
    cases = _by_record(document)
    failed = {name for name, case in cases.items() if case.outcome == Outcome.FAILED}
    assert failed == set(msprobe_dumps.PLANTED)
    assert {cases[name].failure.clause for name in failed} == {"NORM-RMS"}
    assert all(cases[name].op == "rms_norm" for name in failed)
    for name, op in msprobe_dumps.CORRECT_CALLS.items():
        assert (cases[name].outcome, cases[name].op) == (Outcome.PASSED, op), name
    assert set(cases) == set(msprobe_dumps.PLANTED) | set(msprobe_dumps.CORRECT_CALLS)
    assert problems == []
    # every record is accounted for: judged, an API without a contract op, or outside its op
    records, unmapped = _records(dump), not_judged["unmapped"]
    assert len(records) == len(cases) + sum(unmapped.values()) + sum(not_judged["outside"].values())
    apis = {name.rsplit(".", 2)[0] for name in records if not name.startswith("Module.")}
    assert apis - set(MAPPINGS) == {api for api in unmapped if not api.startswith("Module.")}
    assert {"Functional.linear", "Functional.embedding", "Module.LlamaRMSNorm"} <= set(unmapped)
    assert unmapped["Functional.linear"] == sum(name.startswith("Functional.linear.") for name in records)
    assert sum(not_judged["outside"].values()) == len(msprobe_dumps.OUTSIDE_CALLS)


def test_an_op_that_writes_its_arguments_is_in_no_record_after_the_call(dump, replayed):
    """MSPROBE-DUMP: msprobe records the arguments before the call; a KV write returns nothing,
    so its record holds the caches as they were (zeros here) and no output: listed, not judged."""
    record = _records(dump)["NPU._npu_reshape_and_cache.0.forward"]
    cache = record["input_args"][2]
    (path,) = dump.rglob(cache["data_name"])
    assert not torch.load(path, weights_only=True).any()
    assert not [o for o in record["output"] if o]
    assert replayed[2]["unmapped"]["NPU._npu_reshape_and_cache"] == 1


def test_the_command_prints_the_unmapped_apis_and_a_failure_reruns_alone(dump, tmp_path, capsys):
    out = tmp_path / "report"
    assert cli.main(["replay", "--from", "msprobe", str(dump), "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "APIs without a contract op, not judged: Functional.embedding x1, Functional.linear x" in printed
    assert "outside their contract op, not judged: gelu: approximate='none'" in printed
    assert printed.count("APIs without a contract op") == 1  # the report's text, printed once
    report = json.loads((out / "report.json").read_text())
    assert set(report["msprobe"]["not_judged"]["unmapped"]) >= {"Functional.linear", "Module.LlamaMLP"}
    failing = [r for r in report["results"] if r["outcome"] == "failed"]
    assert len(failing) == len(msprobe_dumps.PLANTED)
    assert "NORM-RMS" in (out / "report.md").read_text() and "NPU.npu_rms_norm.0.forward" in printed
    rerun = failing[0]["failure"]["rerun"].split()
    assert rerun[:4] == ["opconform", "replay", "--from", "msprobe"]
    assert cli.main([*rerun[1:], "--out", str(tmp_path / "one")]) == 1
    again = json.loads((tmp_path / "one" / "report.json").read_text())["results"]
    assert [(r["nodeid"], r["outcome"]) for r in again] == [(failing[0]["nodeid"], "failed")]
    assert cli.main(["merge", str(out / "report.json"), "--out", str(tmp_path / "merged")]) == 1
    # the same calls dumped by another process: the ids leave the lone procPID out, so diff pairs them
    other = tmp_path / "other"
    shutil.copytree(dump, other)
    (proc,) = other.glob("step0/proc*")
    proc.rename(proc.with_name("proc1"))
    assert cli.main(["replay", "--from", "msprobe", str(other), "--out", str(tmp_path / "again")]) == 1
    capsys.readouterr()
    assert cli.main(["diff", str(out / "report.json"), str(tmp_path / "again" / "report.json")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "no changes"
    # TOL-STATISTICS: every paired call, the planted failures too, on the same recorded inputs.
    assert "19 of 19 paired cases on the same inputs, 0 with a ratio above 1" in printed[1]


def test_the_reports_and_a_merge_keep_what_was_not_judged(replayed):
    """report.md, report.html and a merge of the replay list the calls it counted and did not judge,
    as the terminal does (report.json: msprobe.not_judged)."""
    data = replayed[0].to_dict()
    lines = render.not_judged_lines(data["msprobe"]["not_judged"])
    assert lines and any(
        "APIs without a contract op, not judged: Functional.embedding x1" in x for x in lines
    )
    merged = rep.merge([data], names=["npu"])
    for document in (data, merged):
        markdown, page = render.markdown(document), render.html_page(document)
        assert all(f"- {line}" in markdown and f"<li>{html.escape(line)}</li>" in page for line in lines)
        assert f"msprobe dump {data['capture']}" in markdown
    assert "Not judged (npu: msprobe dump " in render.markdown(merged)
    assert merged["merged_from"][0]["msprobe"] == data["msprobe"]


class _OpensAFile:
    """A pickle that, loaded with pickle semantics, creates ``path`` (proof that it was not)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("how", ["torch.save", "pickle.dump"])
def test_a_tensor_file_that_is_not_plain_tensor_data_is_refused_and_no_other_case_is_lost(
    dump, replayed, tmp_path, capsys, how
):
    copy = tmp_path / "dump"
    shutil.copytree(dump, copy)
    (target,) = copy.rglob("NPU.npu_geglu.0.forward.input.0.pt")
    marker = tmp_path / "pickle-ran"
    with open(target, "wb") as file:
        (torch.save if how == "torch.save" else pickle.dump)(_OpensAFile(marker), file)
    document, problems, _ = replay_msprobe(copy)
    assert not marker.exists()
    before, after = _by_record(replayed[0]), _by_record(document)
    assert set(after) == set(before)
    refused = after["NPU.npu_geglu.0.forward"]
    assert refused.outcome == Outcome.SKIPPED and str(target) in refused.reason
    assert "not plain tensor data" in refused.reason and "\n" not in refused.reason
    assert problems == [refused.reason]
    assert {n: c.outcome for n, c in after.items() if n != "NPU.npu_geglu.0.forward"} == {
        n: c.outcome for n, c in before.items() if n != "NPU.npu_geglu.0.forward"
    }
    assert cli.main(["replay", "--from", "msprobe", str(copy)]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"opconform replay: {refused.reason}"


def test_a_dump_without_tensors_or_folder_is_one_line_exit_2(dump, tmp_path, capsys):
    copy = tmp_path / "dump"
    shutil.copytree(dump, copy)
    (path,) = copy.rglob("dump.json")
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "task": "statistics"}))
    for folder, says in ((copy, "task 'statistics' dumps no tensors"), (tmp_path / "none", "not a folder")):
        assert cli.main(["replay", "--from", "msprobe", str(folder)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and says in err, err
    assert cli.main(["replay", str(dump)]) == 2  # a dump replayed as a capture: the line says --from
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.endswith("(an msprobe dump? add --from msprobe)"), err
