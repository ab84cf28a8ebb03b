"""Self-tests of ``opconform bench``: output format and skip/error handling, never speed."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from benchmarks import cases as bench_cases
from conformance.devices import absent_reason
from opconform import cli
from opconform.bench import orchestrate as bench
from opconform.bench.measure import Impl
from opconform.bench.output import TABLE_COLUMNS

RESULT_FIELDS = {
    "case",
    "op",
    "family",
    "device",
    "impl",
    "kind",
    "status",
    "peer",
    "params",
    "time_is_absolute",
    "ratio_to_oracle",
    "ratio_to_native",
    "ratio_to_peer",
}
OK_FIELDS = {"median_s", "min_s", "times_s", "repeats", "peak_bytes", "memory_method"}
TOP_FIELDS = {
    "schema",
    "version",
    "torch",
    "shape_set",
    "dtype",
    "isolation",
    "settings",
    "devices",
    "baseline",
    "memory_methods",
    "duration_s",
    "absent_devices",
    "warnings",
    "cases",
    "results",
    "targets",
    "relative_targets",
    "chart",
}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """Arguments of a --quick run on a small selection, and where its JSON and chart go."""
    out = tmp_path_factory.mktemp("bench")
    json_path, png_path = out / "bench.json", out / "bench.png"
    argv = [
        "--quick",
        "--case",
        "gelu_and_mul",
        "--case",
        "swiglu_step",
        "--case",
        "encoder_attention_mask",
        "--backend",
        "native",
        "--backend",
        "npu-emulated",
        "--json",
        str(json_path),
        "--chart",
        str(png_path),
    ]
    return argv, json_path, png_path


def test_quick_run_writes_table_json_and_chart(quick_run, capsys):
    """--quick prints the table, writes schema-conformant JSON and a non-empty PNG."""
    argv, json_path, png_path = quick_run
    assert cli.main(["bench", *argv]) == 0
    stdout = capsys.readouterr().out
    header = stdout.splitlines()[0].split()
    assert " ".join(header) == " ".join(" ".join(TABLE_COLUMNS).split())
    document = json.loads(json_path.read_text())
    assert TOP_FIELDS <= set(document)
    assert (document["schema"], document["version"], document["shape_set"]) == ("opconform-bench", 1, "quick")
    rows = document["results"]
    assert rows and all(RESULT_FIELDS <= set(r) for r in rows)
    ok = [r for r in rows if r["status"] == "ok"]
    assert {r["impl"] for r in ok} >= {"oracle", "native"}
    assert all(OK_FIELDS <= set(r) and r["median_s"] > 0 and r["peak_bytes"] >= 0 for r in ok)
    assert all(r["ratio_to_native"] == 1.0 for r in ok if r["impl"] == "native")
    assert all(r["reason"] for r in rows if r["status"] != "ok")
    assert not any(r["status"] == "error" for r in rows)
    if importlib.util.find_spec("matplotlib") is None:  # the optional 'bench' extra: a stated skip
        assert document["chart"] is None and "matplotlib" in document["chart_skipped"]
        return
    assert document["chart"] == str(png_path)
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png_path.stat().st_size > 1000


def test_process_isolation_measures_peak_rss():
    """A fresh worker per measurement reports a peak from the reset VmHWM (or the stated fallback)."""
    document = bench.run_bench(
        shape_set="quick",
        case_patterns=["silu_and_mul/sana"],
        backend_names=["native"],
        devices=["cpu"],
        isolation="process",
        timeout_s=120,
    )
    ok = [r for r in document["results"] if r["status"] == "ok"]
    assert {r["impl"] for r in ok} == {"oracle", "native"}
    assert all(r["memory_method"] in ("cpu", "cpu-fallback") and r["peak_bytes"] >= 0 for r in ok)


def test_missing_family_is_a_skip_with_reason(monkeypatch):
    """An oracle whose module cannot be imported is skipped with the import error, not raised."""
    monkeypatch.setitem(bench_cases.FAMILIES, "scheduler", "reference.missing_module")
    case = bench_cases.get_case("dpm_scheduler/sana-1024px", "quick")
    status, reason = bench.skip_reason(case, Impl("oracle", "oracle", ("oracle",)), None)
    assert status == "skipped" and "missing_module" in reason


def test_absent_device_is_recorded_not_a_row_per_case():
    """A requested device that is not present is named once under absent_devices (it was one
    skip row per case and implementation, 90 for --quick), and no row is measured on it."""
    if absent_reason("npu") is None:
        pytest.skip("an NPU is present here")
    document = bench.run_bench(
        shape_set="quick", case_patterns=["gelu_and_mul"], backend_names=["native"], devices=["npu"]
    )
    assert document["results"] == [] and list(document["absent_devices"]) == ["npu"]


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--case", "no-such-case"], "--case"),
        (["--repeats", "0"], "--repeats"),
        (["--backend", "no-such-backend", "--quick"], "--backend"),
        (["--device", "tpu"], "--device"),
        (["--json", "/no/such/dir/x.json"], "--json"),
    ],
)
def test_bad_options_name_the_option(argv, option, capsys):
    """Bad options exit with status 2 and a message naming the option."""
    try:
        code = cli.main(["bench", *argv])
    except SystemExit as exc:  # rejected by the parser
        code = exc.code
    assert code == 2
    assert option in capsys.readouterr().err


def test_targets_verdicts():
    """Targets are met/missed only at full shapes; --quick marks them not evaluated."""
    case = bench_cases.get_case("swa_decode_mask/target-b256-128k")
    rows = [
        {"case": case.id, "impl": "oracle", "device": "cpu", "status": "ok", "median_s": s, "peak_bytes": 1}
        for s in (0.5, 3.0)
    ]
    verdicts = [t["verdict"] for t in bench.evaluate_targets(rows, [case], "full")]
    assert verdicts == ["met", "missed"]
    assert bench.evaluate_targets(rows[:1], [case], "quick")[0]["verdict"] == "not-evaluated"


def test_every_case_has_both_shape_sets_and_a_known_family():
    """Each case names a known family and has full and quick parameters."""
    assert len({c.id for c in bench_cases.CASES}) == len(bench_cases.CASES)
    for case in bench_cases.CASES:
        assert case.family in bench_cases.FAMILIES and case.params and case.quick_params


def test_serving_cases_are_valid_paged_calls():
    """The serving cases' quick inputs pass SERVE-ERRORS' validation and the native backend agrees
    with the oracle on them (float64), so a full run times the call the docstring describes."""
    from backends.paged import paged_attention as native
    from reference.kv_cache import dequantized_caches
    from reference.serving import paged_attention, validate_paged_args

    serving = [c for c in bench_cases.cases("quick") if c.family == "serving"]
    assert {c.op for c in serving} == {"paged_attention"} and len(serving) >= 3
    for case in serving:
        args, kwargs = case.make_inputs(case.params, torch.device("cpu"), torch.float64)
        plain = {k: v for k, v in kwargs.items() if k not in ("k_scale", "v_scale")}  # the fp8 read case
        caches = dequantized_caches(*args[1:], kwargs.get("k_scale"), kwargs.get("v_scale"), args[0].dtype)
        meta = validate_paged_args(args[0], *caches, **plain)
        assert meta.block_size == case.params["block_size"]
        torch.testing.assert_close(native(*args, **kwargs), paged_attention(*args, **kwargs))


EXTERNAL = """
import warnings

import torch

from reference import norms


class Mine:
    name = "mine-bench"

    def unavailable(self, device):
        return None

    def rms_norm(self, x, weight, *, eps):
        warnings.warn("mine-bench is slow here\\nsecond line of the warning\\nthird line")
        return norms.rms_norm(x, weight, eps=eps).to(x.dtype)

    def encoder_attention_mask(self, seq_len, *, sliding_window, padding_mask=None, device=None):
        from backends.native import encoder_attention_mask

        return encoder_attention_mask(seq_len, sliding_window=sliding_window, padding_mask=padding_mask,
                                      device=device)


BACKEND = Mine()
"""


def test_external_backend_gets_ratios_to_the_oracle_and_the_peer(tmp_path, monkeypatch, capsys):
    """`bench --backend-module mine --backend mine` (it showed `-` in every ratio cell unless native
    was added): a module beside the user imports from the start folder, its rows have ratios to the
    oracle and to the case's peer (transformers, run as the comparator), a multi-line warning is
    one line after the table, and without --out nothing lands in the current folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(__import__("sys").modules, "mine_bench", raising=False)
    (tmp_path / "mine_bench.py").write_text(EXTERNAL)
    argv = ["bench", "--quick", "--backend-module", "mine_bench", "--backend", "mine-bench", "--no-chart",
            "--case", "rms_norm/", "--case", "encoder_attention_mask/sana"]  # fmt: skip
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir() if p.name != "__pycache__"] == ["mine_bench.py"]
    json_path = out.rsplit("json: ", 1)[1].split()[0]
    document = json.loads(open(json_path).read())
    rows = {(r["case"], r["impl"]): r for r in document["results"]}
    mine = [r for (_, impl), r in rows.items() if impl == "mine-bench" and r["status"] != "not-implemented"]
    assert {r["case"] for r in mine} == {"rms_norm/step-prefill", "encoder_attention_mask/sana-encoder"}
    assert all(r["status"] == "ok" and r["ratio_to_oracle"] > 0 for r in mine)
    assert rows[("encoder_attention_mask/sana-encoder", "mine-bench")]["ratio_to_peer"] > 0
    assert rows[("encoder_attention_mask/sana-encoder", "transformers")]["ratio_to_peer"] == 1.0
    assert ("rms_norm/step-prefill", "transformers") not in rows  # a comparator only where it is the peer
    table, _, after = out.partition("\n\n")
    header = table.splitlines()[0].split()
    assert "oracle" in header and "native" not in header
    assert "second line" not in out
    assert after.count("warning: mine-bench: UserWarning: mine-bench is slow here") == 1


def test_every_family_has_bench_cases():
    """The bench times every family of ops the suite checks (norms had no case)."""
    from backends.protocols import OPS

    assert {bench_cases.FAMILIES.get(c.family) and c.family for c in bench_cases.CASES} >= set(OPS.values())
    assert all(OPS[c.op] == c.family for c in bench_cases.CASES)


def test_capture_overhead_benchmark_runs_small_and_checks_the_budget(capsys):
    """The capture-overhead benchmark runs at a tiny size and reports the budget check and steal."""
    from benchmarks import capture_overhead

    capture_overhead.main(["--calls", "4", "--width", "16", "--rows", "2", "--rounds", "1"])
    out = capsys.readouterr().out
    # 4 calls x (input, output) x [2, 16] x 4 bytes
    assert "4 calls recorded; tensor bytes 1024 <= budget 1024: True" in out
    assert out.count("the host took meanwhile:") == 2


def test_capture_overhead_steal_is_read_from_the_first_line_of_proc_stat(tmp_path):
    """Steal is the eighth number of /proc/stat's first line, in clock ticks; unreadable: 0."""
    import os

    from benchmarks import capture_overhead

    stat = tmp_path / "stat"
    stat.write_text("cpu  10 1 20 900 3 0 2 250 0 0\ncpu0 5 0 10 450 1 0 1 125 0 0\n")
    assert capture_overhead._stolen(str(stat)) == 250 / os.sysconf("SC_CLK_TCK")
    assert capture_overhead._stolen(str(tmp_path / "absent")) == 0.0


@pytest.mark.parametrize("option", ["--rows", "--calls", "--width", "--rounds", "--threads", "--shard-bytes"])
def test_capture_overhead_benchmark_rejects_non_positive_options(option, capsys):
    """A capture-overhead option below 1 exits 2 with a line naming the option."""
    from benchmarks import capture_overhead

    with pytest.raises(SystemExit) as exit_:
        capture_overhead.main([option, "0"])
    assert exit_.value.code == 2
    assert f"argument {option}: expected a positive int, got '0'" in capsys.readouterr().err


def test_relative_targets_verdicts():
    """A relative target is met only when both time and peak are within its ratio of the baseline's;
    --quick marks it not evaluated, and a missing baseline row is not-run, never met."""
    case = bench_cases.get_case("paged_attention/target-read-8x4096-pool1M-fp8")
    base = case.relative_target.baseline

    def rows(seconds, peak):
        make = lambda name, s, p: {"case": name, "impl": "oracle", "device": "cpu", "status": "ok",  # noqa: E731
                                   "median_s": s, "peak_bytes": p}  # fmt: skip
        return [make(base, 2.0, 100), make(case.id, seconds, peak)]

    verdicts = [bench.evaluate_relative_targets(rows(s, p), [case], "full")[0]["verdict"]
                for s, p in ((2.9, 150), (3.1, 100), (2.0, 151))]  # fmt: skip
    assert verdicts == ["met", "missed", "missed"]
    entry = bench.evaluate_relative_targets(rows(2.2, 110), [case], "quick")[0]
    assert (entry["verdict"], entry["time_ratio"], entry["peak_ratio"]) == ("not-evaluated", 1.1, 1.1)
    assert bench.evaluate_relative_targets(rows(1.0, 1)[1:], [case], "full")[0]["verdict"] == "not-run"


def test_a_relative_target_brings_its_baseline_case():
    """--case naming only the 1M-slot pool reads also runs the small pools they are measured against."""
    chosen = [c.id for c in bench.select_cases("full", ["pool1M"])]
    assert chosen == [
        "paged_attention/read-8x4096-pool32k",
        "paged_attention/target-read-8x4096-pool1M",
        "paged_attention/read-8x4096-pool32k-fp8",
        "paged_attention/target-read-8x4096-pool1M-fp8",
    ]


def test_pool_read_cases_read_the_same_keys_from_both_pools():
    """The pair reads 8 x 4096 keys from a pool of exactly those slots and from a 1M-slot pool, and
    at the quick shape both pools give the same call but for where the blocks lie."""
    for fp8 in ("", "-fp8"):
        small = bench_cases.get_case(f"paged_attention/read-8x4096-pool32k{fp8}")
        large = bench_cases.get_case(f"paged_attention/target-read-8x4096-pool1M{fp8}")
        assert large.relative_target.baseline == small.id and large.relative_target.ratio == 1.5
        p, q = small.params, large.params
        assert p["blocks"] * p["block_size"] == p["batch"] * p["keys"] == 8 * 4096
        assert q["blocks"] * q["block_size"] == 1 << 20 and {**q, "blocks": 0} == {**p, "blocks": 0}
        calls = [c.make_inputs(c.quick_params, torch.device("cpu"), torch.float32) for c in (small, large)]
        (_, k_small, _), kw_small = calls[0]
        (_, k_large, _), kw_large = calls[1]
        assert k_large.shape[0] > k_small.shape[0] == small.quick_params["blocks"]
        assert k_small.dtype == (torch.float8_e4m3fn if fp8 else torch.float32)
        assert sorted(kw_small["block_table"].flatten().tolist()) == list(range(k_small.shape[0]))
        assert torch.equal(kw_small["seq_lens"], kw_large["seq_lens"])


def test_quick_run_prints_the_relative_targets(tmp_path, capsys):
    """The pool-read cases' relative targets are printed after the table, with both cases' figures."""
    argv = [
        "bench",
        "--quick",
        "--case",
        "pool1M",
        "--backend",
        "oracle",
        "--no-chart",
        "--out",
        str(tmp_path),
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    block = out.split("Relative oracle targets")[1]
    assert block.count("over paged_attention/read-8x4096-pool32k") == 2
    assert block.count("target <= 1.5x: not-evaluated (targets apply to the full shapes, not --quick)") == 2
