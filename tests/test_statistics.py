"""TOL-STATISTICS (spec/tolerances.md): msprobe's accuracy statistics beside each verdict.

The statistics equal msprobe's own compare functions on the same pair of tensors (skipped, with
the reason, where msprobe is not installed) and a hand computation from the spec text; a real
run's report shows them next to each failing comparison's verdict; ``opconform diff`` of two real
``opconform run``s on two backends with one seed pairs their cases and gives msprobe's ratios.
"""

from __future__ import annotations

import html
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from report_runs import shared_reports
from suite_runner import produced_once

from conformance import results, statistics
from conformance.checks import assert_close
from conformance.errors import ConformanceError
from opconform import ratios, report
from opconform.cli import main

REPO = Path(__file__).resolve().parent.parent
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def msprobe_statistics(actual: torch.Tensor, expected: torch.Tensor) -> dict:
    """msprobe's own functions on the pair, prepared as its ``Comparator._compare_torch_tensor``
    prepares a bench and a device output (bfloat16 read as float32, then numpy)."""
    algorithm = pytest.importorskip(
        "msprobe.pytorch.api_accuracy_checker.compare.algorithm",
        reason="msprobe (mindstudio-probe) is not installed: its compare functions are the peer",
    )
    from msprobe.pytorch.api_accuracy_checker.compare.compare_column import CompareColumn
    from msprobe.pytorch.api_accuracy_checker.compare.compare_input import CompareInput
    from msprobe.pytorch.api_accuracy_checker.precision_standard.benchmark_compare import BenchmarkCompare
    from msprobe.pytorch.api_accuracy_checker.precision_standard.ulp_compare import UlpCompare

    dtype, bench, device = actual.dtype, expected, actual
    if dtype == torch.bfloat16:
        bench, device = bench.to(torch.float32), device.to(torch.float32)
    bench, device = bench.numpy(), device.numpy()
    _, with_eps = algorithm.get_abs_bench_with_eps(bench, dtype)
    abs_err = algorithm.get_abs_err(bench, device)
    rel_err = algorithm.get_rel_err_origin(abs_err, with_eps)
    column = CompareColumn()
    BenchmarkCompare(CompareInput(bench, device, column, dtype, rel_err)).compare()
    UlpCompare(CompareInput(bench, device, column, dtype, rel_err)).compare()
    cosine, _, _ = algorithm.cosine_sim(bench, device)
    return {
        "cosine": None if isinstance(cosine, str) else float(cosine),  # msprobe's blank is " "
        "max_abs_error": float(algorithm.get_max_abs_err(abs_err)[0]),
        "max_rel_error": float(column.max_rel_error),
        "mean_rel_error": float(column.mean_rel_error),
        "rmse": float(column.rmse),
        "small_value_error_ratio": float(column.small_value_err_ratio),
        "max_ulp_error": float(column.max_ulp_error),
        "within_thousandth": float(algorithm.get_rel_err_ratio(rel_err, 0.001)[0]),
    }


def pair(dtype, kind: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """An output in ``dtype`` and its float64 oracle: ``kind`` picks the values that exercise each
    mask (ordinary, small, zeros, an overflow to inf, a NaN, all zeros, one element)."""
    gen = torch.Generator().manual_seed(seed)
    scale = {"small": 1e-4, "tiny": 1e-7}.get(kind, 1.0)
    expected = torch.randn(257, generator=gen, dtype=torch.float64) * scale
    expected[:7] = 0.0
    actual = (expected * (1 + 2e-3 * torch.randn(257, generator=gen, dtype=torch.float64))).to(dtype)
    if kind == "overflow":
        expected[10] = 7e4 if dtype == torch.float16 else 4e38
        actual[10] = float("inf")
    if kind == "nan":
        actual[11] = float("nan")
    if kind == "zeros":
        expected, actual = torch.zeros_like(expected), torch.zeros_like(actual)
    if kind == "one":
        expected, actual = expected[8:9], actual[8:9]
    return actual, expected


def same(ours, theirs) -> bool:
    if ours is None or theirs is None:
        return ours is None and theirs is None
    if math.isnan(ours) or math.isnan(theirs):
        return math.isnan(ours) and math.isnan(theirs)
    return math.isclose(ours, theirs, rel_tol=1e-6, abs_tol=1e-300)  # bfloat16's float32 means


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's, inside msprobe (log2 of 0, overflow)
@pytest.mark.parametrize("kind", ["plain", "small", "tiny", "overflow", "nan", "zeros", "one"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_statistics_match_msprobe_on_the_same_tensors(dtype, kind):
    actual, expected = pair(dtype, kind)
    ours, theirs = statistics.compute(actual, expected), msprobe_statistics(actual, expected)
    assert list(ours) == list(statistics.NAMES)
    wrong = {n: (ours[n], theirs[n]) for n in statistics.NAMES if not same(ours[n], theirs[n])}
    assert not wrong, f"{dtype} {kind}: ours, msprobe's: {wrong}"


def test_statistics_by_hand_from_the_spec_text():
    """Four float32 elements worked from TOL-STATISTICS's definitions, no msprobe needed."""
    expected = torch.tensor([1.0, -2.0, 1e-7, 0.5], dtype=torch.float64)
    actual = torch.tensor([1.0, -2.0, 3e-7, 0.5], dtype=torch.float32) + torch.tensor([0, 2**-20, 0, 0])
    got = actual.double()
    stats = statistics.compute(actual, expected)
    abs_err = (got - expected).abs()
    eps = torch.finfo(torch.float64).eps
    # Element 2 (|e| = 1e-7 <= 2^-20) is the only small value, and its error 2e-7 exceeds 2^-30.
    assert stats["small_value_error_ratio"] == 1.0
    rel = [abs_err[i].item() / (abs(expected[i].item()) + eps) for i in (0, 1, 3)]
    assert stats["max_rel_error"] == pytest.approx(max(rel), rel=1e-12)
    assert stats["mean_rel_error"] == pytest.approx(sum(rel) / 3, rel=1e-12)
    big = [abs_err[i].item() ** 2 for i in (0, 1, 3)]
    assert stats["rmse"] == pytest.approx(math.sqrt(sum(big) / 4 * (4 / (3 + 1e-4) + 1e-4)), rel=1e-12)
    assert stats["max_abs_error"] == pytest.approx(abs_err.max().item(), rel=1e-12)
    assert stats["within_thousandth"] == 3 / 4  # the small element's relative error is 2
    a, e = got / got.abs().max(), expected / expected.abs().max()
    assert stats["cosine"] == pytest.approx((a @ e / (a.norm() * e.norm())).item(), rel=1e-12)
    # ULP of element 2 in float32: (3e-7 - 1e-7) * 2^(23 - floor(log2 1e-7)) with floor = -24.
    ulp_2 = (actual[2].double().item() - 1e-7) * 2.0 ** (23 + 24)
    assert stats["max_ulp_error"] == pytest.approx(ulp_2, rel=1e-6)
    assert statistics.compute(torch.tensor([1, 2]), torch.tensor([1.0, 2.0])) is None  # integers: none


def test_a_failure_carries_its_comparisons_statistics_and_a_case_keeps_the_worst():
    expected = torch.linspace(-1, 1, 64, dtype=torch.float64)
    with statistics.collecting() as collector:
        assert_close(expected.float(), expected, clause="ACT-GEGLU", context="t", family="activations")
        wrong = (expected * 1.01).half()
        with pytest.raises(ConformanceError) as raised:
            assert_close(wrong, expected, clause="ACT-GEGLU", context="t", family="activations")
        # A metamorphic comparison has no oracle side: nothing recorded.
        assert_close(expected.float(), expected, clause="ACT-VIEWS", context="t", family="activations",
                     expected_as="contiguous result")  # fmt: skip
    dtype, stats = raised.value.statistics
    assert dtype == "float16" and stats == statistics.compute(wrong, expected)
    # The verdict's own largest absolute error is the statistics' max abs: the same comparison.
    assert stats["max_abs_error"] == raised.value.max_abs_error
    assert sorted(collector.by_dtype) == ["float16", "float32"]
    float32 = collector.by_dtype["float32"]
    assert (float32["comparisons"], float32["elements"]) == (1, 64)
    record = statistics.case_record(None, raised.value)
    assert record == {"basis": statistics.FAILING, "dtypes": {"float16": stats}}
    worst = statistics.Collector()
    for value in (0.5, 0.9):
        worst.add("float32", {**dict.fromkeys(statistics.NAMES, value), "max_ulp_error": None}, 10)
    assert worst.by_dtype["float32"]["cosine"] == 0.5 and worst.by_dtype["float32"]["rmse"] == 0.9
    assert worst.by_dtype["float32"]["max_ulp_error"] is None and worst.by_dtype["float32"]["elements"] == 20
    assert math.isnan(statistics.worse("rmse", 0.1, math.nan))


def test_results_keep_statistics_and_refuse_a_malformed_record(tmp_path):
    record = {"basis": statistics.WORST, "dtypes": {"float16": {"cosine": 1.0}}}
    case = results.Case(nodeid="t::x", outcome=results.Outcome.PASSED, statistics=record)
    document = results.Document(results=[case])
    results.dump(document, tmp_path / "r.json")
    loaded = results.load(tmp_path / "r.json")
    assert loaded.version == results.VERSION == 5 and loaded.results[0].statistics == record
    data = document.to_dict()
    data["results"][0]["statistics"] = [1, 2]
    with pytest.raises(results.ResultsError, match=r"results\[0\]: field 'statistics'"):
        results.Document.from_dict(data, "r.json")
    data["version"], data["results"][0]["statistics"] = 4, None  # a version-4 report: none
    assert results.Document.from_dict(data).results[0].statistics is None


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    return shared_reports(tmp_path_factory)["undeclared"]


def test_the_report_shows_the_statistics_beside_each_failing_comparisons_verdict(broken):
    """The real run with failing backends (tests/report_runs.py): every failure under a direct
    numeric comparison has its statistics, shown under its verdict in report.md and report.html."""
    folder = Path(broken["dir"])
    document = report.load(folder / "report.json")
    numeric = [r for r in report.failures(document) if (r.get("failure") or {}).get("largest_violation")]
    assert numeric, "the run has numeric failures"
    markdown, page = (folder / "report.md").read_text(), (folder / "report.html").read_text()
    for result in numeric:
        record = result["statistics"]
        assert record["basis"] == statistics.FAILING
        (dtype, stats), = record["dtypes"].items()  # fmt: skip
        assert stats["max_abs_error"] == result["failure"]["largest_abs_error"]
        line = statistics.line(record)
        verdict = result["failure"]["message"].splitlines()[0]
        assert html.escape(line) in page and f"`{verdict}`\n    - {line}" in markdown
    passed = [r for r in document["results"] if r["outcome"] == "passed" and r.get("statistics")]
    assert passed and all(r["statistics"]["basis"] == statistics.WORST for r in passed)


def test_replay_records_each_calls_statistics(tmp_path):
    """A captured call's case holds its outputs' statistics against the oracle: a passing call the
    worst over its one comparison, a wrong call (erf GELU recorded as new_gelu) its failing one."""
    import torch.nn.functional as F

    from opconform.capture import Capture
    from opconform.capture.judge import replay
    from reference.norms import rms_norm

    x, weight = torch.randn(4, 16, generator=torch.Generator().manual_seed(3)) * 3, torch.ones(16)
    with Capture(tmp_path / "cap", source="port") as cap:
        norm = cap.wrap(lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, "rms_norm",
                        lambda x, w: {"x": x, "weight": w, "eps": 1e-6}, name="norm")  # fmt: skip
        gelu = cap.wrap(lambda x: F.gelu(x), "new_gelu", lambda x: {"x": x}, name="act")
        normed = norm(x, weight)
        gelu(x)
    document, problems = replay(tmp_path / "cap")
    assert not problems
    cases = {case.op: case for case in document.results}
    assert cases["rms_norm"].outcome == results.Outcome.PASSED
    record = cases["rms_norm"].statistics
    assert record["basis"] == statistics.WORST
    want = statistics.compute(normed, rms_norm(x, weight, eps=1e-6))
    assert record["dtypes"] == {"float32": {"comparisons": 1, "elements": 64, **want}}
    failed = cases["new_gelu"]
    assert failed.outcome == results.Outcome.FAILED and failed.statistics["basis"] == statistics.FAILING
    assert failed.statistics["dtypes"]["float32"]["max_abs_error"] == failed.failure.largest_abs_error
    # The call's own inputs, counted: a replay of the same call elsewhere pairs with it for ratios.
    assert (
        failed.statistics["dtypes"]["float32"]["comparisons"],
        failed.statistics["dtypes"]["float32"]["elements"],
    ) == (1, 64)


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


SEEDED = "test_gemma_rms_norm_matches_oracle or test_rms_norm_matches_oracle"


def _two_seeded_runs(root: Path) -> dict:
    """Two ``opconform run``s of one seed, on ``native`` and on ``npu-emulated``, side by side."""
    procs = {}
    for backend in ("native", "npu-emulated"):
        options = ["--backend", backend, "--device", "cpu", "-n", "0", "--out", str(root / backend)]
        pytest_args = ["--", "--hypothesis-seed=20251", "-k", SEEDED]
        command = [sys.executable, "-m", "opconform.cli", "run", *options, *pytest_args]
        procs[backend] = subprocess.Popen(command, cwd=root, env=_env(), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True)  # fmt: skip
    return {name: [proc.wait(timeout=600), str(root / name / "report.json")] for name, proc in procs.items()}


def test_diff_of_two_seeded_runs_on_two_backends_pairs_every_case_with_ratios(tmp_path_factory, capsys):
    runs = produced_once(tmp_path_factory, "opconform-seeded-runs", _two_seeded_runs)
    assert [status for status, _ in runs.values()] == [0, 0]
    old, new = (report.load(path) for _, path in runs.values())
    assert len(old["results"]) == len(new["results"]) == 2
    pairs = ratios.error_ratios(old, new)
    assert [p["key"] for p in pairs] == sorted(ratios.pair_key(r) for r in old["results"])
    for pair in pairs:  # the same seed drew the same inputs on both backends
        assert "ratios" in pair, pair.get("why")
    keyed_old, keyed_new, by_pair = ratios.keyed(old["results"], new["results"])
    assert by_pair and keyed_old.keys() == keyed_new.keys()
    assert main(["diff", runs["native"][1], runs["npu-emulated"][1]]) == 0
    out = capsys.readouterr().out
    assert "no changes" in out and "2 of 2 paired cases on the same inputs" in out


def _document(backend: str, device: str, stats: dict, basis=statistics.WORST) -> dict:
    case = {"nodeid": f"t.py::test_x[{backend}-{device}-tanh]", "outcome": "passed", "backend": backend,
            "device": device, "statistics": {"basis": basis, "dtypes": {"float16": stats}}}  # fmt: skip
    return {"schema": results.SCHEMA, "version": results.VERSION, "results": [case]}


def test_ratios_are_msprobes_and_only_on_the_same_inputs():
    base = {"comparisons": 3, "elements": 30, "small_value_error_ratio": 0.0, "rmse": 2e-3,
            "max_rel_error": 1e-3, "mean_rel_error": 1e-4}  # fmt: skip
    gpu = _document("acme", "cuda", base)
    npu = _document("acme", "npu", {**base, "rmse": 3e-3, "max_rel_error": math.inf})
    (pair,) = ratios.error_ratios(gpu, npu)
    assert pair["key"] == "t.py::test_x[tanh]" and pair["columns"] == ("acme@cuda", "acme@npu")
    got = pair["ratios"]["float16"]
    # mean rel 1e-4 is below float16's minimum error 2^-11: the denominator is 2^-11.
    assert (got["rmse"], got["mean_rel_error"], got["small_value_error_ratio"]) == (1.5, 1e-4 / 2**-11, 0)
    assert math.isnan(got["max_rel_error"])
    calc_ratio = pytest.importorskip(
        "msprobe.pytorch.api_accuracy_checker.compare.algorithm", reason="msprobe is not installed"
    ).calc_ratio
    assert got["mean_rel_error"] == calc_ratio(1e-4, 1e-4, "torch.float16")
    other = _document("acme", "npu", {**base, "comparisons": 2})
    assert "not the same inputs" in ratios.error_ratios(gpu, other)[0]["why"]
    # A failed property's record counts no comparisons: its failing example is its own.
    uncounted = {k: v for k, v in base.items() if k not in ("comparisons", "elements")}
    failing = _document("acme", "npu", uncounted, basis=statistics.FAILING)
    assert "its own failing example" in ratios.error_ratios(gpu, failing)[0]["why"]
    only_backend = {"nodeid": "t.py::test_y[acme-npu]", "backend": "acme", "device": "npu"}
    assert ratios.pair_key(only_backend) == "t.py::test_y"
    # Two columns on one side (a merged report): a stripped key is no longer one case; by node id.
    both = {**gpu, "results": gpu["results"] + _document("other", "cuda", base)["results"]}
    assert ratios.keyed(both["results"], npu["results"])[2] is False
    text = "\n".join(ratios.lines(ratios.error_ratios(gpu, npu)))
    assert "t.py::test_x[tanh] (acme@cuda -> acme@npu): float16 small-value err 0, RMSE 1.5" in text
    assert json.loads(json.dumps(pair, default=str))  # a JSON-able record
