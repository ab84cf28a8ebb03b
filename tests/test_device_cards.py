"""Device cards (spec/devices.md, DEV-CARDS): parsing and checking ``--device`` values, the round
robin, and real pytest-xdist runs on a faked device count (``OPCONFORM_TEST_DEVICE_COUNT``, test-only)
whose workers' visibility variables, recorded cards and warnings are read back. The faked cards
are absent to torch here, so the probe's cases skip; what a worker saw is written by a plain test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conformance import devices, product
from conformance.harness import cards

REPO = Path(__file__).resolve().parent.parent
PROBE = """
import os, pathlib, pytest

@pytest.mark.clause("NORM-RMS")
@pytest.mark.parametrize("i", range(8))
def test_probe(backend, device, i):
    pass

@pytest.mark.parametrize("i", range(8))
def test_seen(i):  # what this worker's environment holds: its pinned visible ids
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    seen = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")}
    (pathlib.Path(os.environ["SEEN_DIR"]) / worker).write_text(json.dumps(seen))

import json
"""


WHEN_MANIFEST = """\
[[expect]]
clause = "NORM-RMS"
reason = "intermittent"
when = "torch >= 1.0 and python >= 3"

[[expect]]
clause = "NORM-RMS"
reason = "intermittent"
when = "cann >= 8.0"
"""


def _run(tmp_path: Path, name: str, *args: str, env: dict[str, str]) -> dict:
    """pytest on the probe with ``args`` and ``env``: its document, output and what each worker saw."""
    folder = tmp_path / name
    (folder / "seen").mkdir(parents=True)
    (folder / "test_probe.py").write_text(PROBE)
    report = folder / "out.json"
    # Not the caller's cards, nor its xdist worker's name (when these tests run under -n).
    environment = {k: v for k, v in os.environ.items()
                   if k not in devices.VISIBLE_ENV.values() and not k.startswith("PYTEST_XDIST")}  # fmt: skip
    environment.update(env, SEEN_DIR=str(folder / "seen"))
    environment["PYTHONPATH"] = os.pathsep.join([str(REPO), environment.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "pytest", "test_probe.py", "-p", "no:randomly", "-p", "no:cacheprovider",
               "--backend=native", f"--opconform-json={report}", *args]  # fmt: skip
    proc = subprocess.run(command, cwd=folder, env=environment, capture_output=True, text=True, timeout=300)
    document = json.loads(report.read_text()) if report.exists() else {}
    seen = {p.name: json.loads(p.read_text()) for p in (folder / "seen").iterdir()}
    return {"proc": proc, "document": document, "seen": seen}


@pytest.fixture(scope="module")
def runs() -> dict:
    """The real runs every check below reads (each costs a few seconds: shared). Their folder is
    not pytest's tmp_path: other pytest sessions on the host may prune those while these run."""
    with tempfile.TemporaryDirectory(prefix="opconform-cards-") as folder:
        yield _runs(Path(folder))


def _runs(tmp: Path) -> dict:
    manifest = tmp / "native.toml"
    manifest.write_text(WHEN_MANIFEST)
    container = {"CUDA_VISIBLE_DEVICES": "4,5,6", devices.TEST_COUNT_ENV: "cuda=2,npu=3"}
    return {
        # bare cuda: every visible card; the list names 3 cards, the runtime exposes 2; -n auto
        "auto": _run(tmp, "auto", "--device=cuda", "-n", "auto", env=container),
        # explicit cards: 1 cuda (more workers: round robin), 3 npu (fewer workers: npu:2 untested)
        "mixed": _run(tmp, "mixed", "--device=cuda:1", "--device=npu:0,1,2", "-n", "2", env=container),
        # one process: the chosen card by index, no pinning; entries with version conditions
        "single": _run(
            tmp,
            "single",
            "--device=cuda:1,0",
            "-p",
            "no:xdist",
            f"--opconform-expectations={manifest}",
            env=container,
        ),  # fmt: skip
        # an index past the visible cards
        "bad": _run(tmp, "bad", "--device=cuda:2", "-n", "2", env=container),
    }


def test_parse():
    assert devices.parse("cpu") == ("cpu", ())
    assert devices.parse("npu") == ("npu", None)
    assert devices.parse("npu:3") == ("npu", (3,))
    assert devices.parse("cuda:0,1,1,3") == ("cuda", (0, 1, 3))
    refused = {"tpu": "unknown device type", "cpu:0": "takes no card index", "npu:x": "whole numbers",
               "npu:-1": "whole numbers", "npu:": "whole numbers"}  # fmt: skip
    for value, words in refused.items():
        with pytest.raises(devices.DeviceError, match=words) as caught:
            devices.parse(value)
        assert str(caught.value).startswith(f"--device {value}: ")


def test_cards_index_the_visible_list_cut_to_the_runtime_count(monkeypatch):
    monkeypatch.setenv(devices.TEST_COUNT_ENV, "npu=2")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "6, 7,8")
    assert devices.visible_ids("npu") == ["6", "7"]  # a container listing more than it exposes
    assert devices.cards("npu", None) == [0, 1] and devices.cards("npu", (1,)) == [1]
    with pytest.raises(devices.DeviceError, match=r"--device npu:2: no card 2: 2 npu card\(s\) visible"):
        devices.cards("npu", (2,))
    assert devices.pin_environment({"npu": 1}) == {"ASCEND_RT_VISIBLE_DEVICES": "7"}
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES")
    assert devices.visible_ids("npu") == ["0", "1"]


def test_round_robin_and_untested_cards():
    assert devices.assign(3, {"cuda": [1, 2], "npu": [0, 1, 2, 3]}) == [
        {"cuda": 1, "npu": 0}, {"cuda": 2, "npu": 1}, {"cuda": 1, "npu": 2}]  # fmt: skip
    assert cards.untested({"npu": [0, 1, 2, 3]}, 4) == []
    assert cards.untested({"npu": [0, 1, 2, 3]}, 3) == [
        "4 npu cards chosen, 3 worker(s): npu:3 not tested (-n 4 or -n auto)"
    ]


def test_auto_gives_one_worker_per_visible_card(runs):
    run = runs["auto"]
    document, output = run["document"], run["proc"].stdout
    assert "created: 2/2 workers" in output, output[-2000:]
    assert document["cards"] == {"cuda:0": "4", "cuda:1": "5"}
    assert sorted(s["CUDA_VISIBLE_DEVICES"] for s in run["seen"].values()) == ["4", "5"]
    recorded = {r["device"] for r in document["results"]}
    assert recorded <= set(document["cards"]) and len(recorded) >= 2, recorded
    assert document["devices"] == ["cuda"]  # the type; its cards in each case and in "cards"


def test_more_workers_round_robin_fewer_leave_cards_untested(runs):
    run = runs["mixed"]
    seen = run["seen"]
    assert sorted(seen) == ["gw0", "gw1"], run["proc"].stdout[-2000:]
    assert [seen[w]["CUDA_VISIBLE_DEVICES"] for w in ("gw0", "gw1")] == ["5", "5"]
    assert [seen[w]["ASCEND_RT_VISIBLE_DEVICES"] for w in ("gw0", "gw1")] == ["0", "1"]
    document = run["document"]
    assert document["cards"] == {"cuda:1": "5", "npu:0": "0", "npu:1": "1"}
    assert {r["device"] for r in document["results"]} <= set(document["cards"])
    assert "3 npu cards chosen, 2 worker(s): npu:2 not tested (-n 3 or -n auto)" in document["warnings"]
    assert set(document["product"]) == set(product.KEYS)


def test_one_process_runs_on_the_chosen_card(runs):
    document = runs["single"]["document"]
    assert document["cards"] == {"cuda:1": "5"}  # the first card chosen
    assert {r["device"] for r in document["results"]} == {"cuda:1"}
    assert runs["single"]["seen"]["main"]["CUDA_VISIBLE_DEVICES"] == "4,5,6"  # never re-pinned
    assert "2 cuda cards chosen, 1 worker(s): cuda:0 not tested (-n 2 or -n auto)" in document["warnings"]


def test_a_bad_index_is_one_usage_line(runs):
    proc = runs["bad"]["proc"]
    assert proc.returncode == 4 and not runs["bad"]["document"], proc.stdout[-2000:]
    assert "ERROR: --device cuda:2: no card 2: 2 cuda card(s) visible" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_an_expectation_applies_only_to_its_versions(runs):
    """DEV-WHEN: the entry whose condition holds applies (its cases were skipped: stale, not "not
    applicable"); the one naming CANN, absent here, does not, and says why."""
    statuses = {e["when"]: e for e in runs["single"]["document"]["expectations"] if e.get("when")}
    assert statuses["torch >= 1.0 and python >= 3"]["status"] != "not applicable"
    entry = statuses["cann >= 8.0"]
    assert (
        entry["status"] == "not applicable"
        and entry["why"] == "when 'cann >= 8.0' is false here (cann absent)"
    )


def test_a_case_on_a_card_reruns_on_that_card():
    """DEV-CARDS: the rerun line of a case a process ran on npu:3 names --device=npu:3; a cpu case's
    names no card."""
    from types import SimpleNamespace

    from conformance import rerun
    from conformance.harness import activation

    config = SimpleNamespace(stash=pytest.Stash(), rootpath=REPO)
    config.stash[activation.STATE] = activation.State(card={"npu": "npu:3"})
    config.stash[rerun.KINDS] = {"t.py::test_x[native-npu]": "npu", "t.py::test_x[native-cpu]": "cpu"}
    assert rerun.for_item(config, "t.py::test_x[native-npu]").endswith("--device=npu:3")
    assert "--device" not in rerun.for_item(config, "t.py::test_x[native-cpu]")
