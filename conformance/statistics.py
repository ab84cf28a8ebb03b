"""Accuracy statistics beside each verdict, defined as msprobe defines them (spec/tolerances.md,
TOL-STATISTICS): reported, never judged.

``compute`` gives one comparison's statistics (an output against its float64 oracle); while a case
runs, ``collecting`` gathers those of every direct comparison ``assert_close`` makes, and
``case_record`` is what the case's results record keeps: per output dtype, the failing comparison's
statistics, or the worst of each over the case's comparisons. Torch is imported where a statistic
is computed, so the results readers (merge, diff) stay torch-free.
"""

from __future__ import annotations

import contextlib
import math

# The statistics, in the order the reports show them, and which way is worse.
NAMES = (
    "cosine",
    "max_abs_error",
    "max_rel_error",
    "mean_rel_error",
    "rmse",
    "small_value_error_ratio",
    "max_ulp_error",
    "within_thousandth",
)
LOWER_IS_WORSE = ("cosine", "within_thousandth")
LABELS = {
    "cosine": "cosine",
    "max_abs_error": "max abs",
    "max_rel_error": "max rel",
    "mean_rel_error": "mean rel",
    "rmse": "RMSE",
    "small_value_error_ratio": "small-value err",
    "max_ulp_error": "max ULP",
    "within_thousandth": "within 1/1000",
}
FAILING, WORST = "failing comparison", "worst of the case's comparisons"
# TOL-STATISTICS: msprobe's thresholds by output dtype name (its StandardConfig and CompareConst):
# small values, the absolute error a small value may have, the ULP parameters (min exponent,
# mantissa bits), the minimum error a ratio's denominator takes.
SMALL_VALUE = {"float16": 2**-10, "bfloat16": 2**-10, "float32": 2**-20}
SMALL_VALUE_ATOL = {"float16": 1e-16, "bfloat16": 1e-16, "float32": 2**-30}
DEFAULT_SMALL_VALUE, DEFAULT_SMALL_VALUE_ATOL = 2**-20, 2**-30
ULP_PARAMETERS = {"float16": (-14, 10), "bfloat16": (-126, 7), "float32": (-126, 23)}
BFLOAT16_EPS = 2**-8
THOUSANDTH = 0.001
MINIMUM_ERROR = {"float16": 2**-11, "bfloat16": 2**-8, "float32": 2**-14}
DEFAULT_MINIMUM_ERROR = 2**-14


def _float(value) -> float | None:
    return None if value is None else float(value)


def compute(actual, expected, dtype=None) -> dict | None:
    """The statistics of ``actual`` (a backend's floating-point output) against ``expected`` (its
    float64 oracle, same shape), as msprobe's api_accuracy_checker computes them on a bench and a
    device output; None for an empty or non-floating output (msprobe compares those bit by bit).
    ``dtype``: the output's dtype when ``actual`` holds its values exactly in a wider one."""
    import torch

    dtype = dtype or actual.dtype
    if not dtype.is_floating_point or actual.numel() == 0:
        return None
    # msprobe reads the device side as numpy does: bfloat16 (and float8) as float32, and then
    # the bench side as float32 too for a bfloat16 output.
    storage = dtype if dtype in (torch.float16, torch.float32, torch.float64) else torch.float32
    name = str(dtype).removeprefix("torch.")
    device = actual.detach().to("cpu", storage).reshape(-1)
    bench = expected.detach().to("cpu", torch.float64).reshape(-1)
    if dtype == torch.bfloat16:
        bench = bench.float()
    abs_bench = bench.abs()
    eps = BFLOAT16_EPS if name == "bfloat16" else torch.finfo(bench.dtype).eps
    abs_bench_with_eps = abs_bench + eps
    abs_err = (device - bench).abs()  # in numpy's promoted dtype: float32 for bfloat16
    rel_err_origin = (abs_err / abs_bench_with_eps).abs()
    # Benchmark metrics (msprobe BenchmarkCompare): small values and inf/NaN are apart.
    both_finite = torch.isfinite(device) & torch.isfinite(bench.to(device.dtype))
    inf_nan = ~both_finite
    small = (abs_bench <= SMALL_VALUE.get(name, DEFAULT_SMALL_VALUE)) & both_finite
    small_count = int(small.sum())
    small_errors = int((small & (abs_err > SMALL_VALUE_ATOL.get(name, DEFAULT_SMALL_VALUE_ATOL))).sum())
    rel_err = torch.where(small | inf_nan, -1.0, abs_err / abs_bench_with_eps)
    judged = rel_err[rel_err >= 0]
    masked = torch.where(inf_nan | small, 0.0, abs_err)
    size, excluded = abs_err.numel(), int((inf_nan | small).sum())
    mse = float(masked.square().mean()) * (size / (size - excluded + 0.0001) + 0.0001)
    max_rel = float(rel_err.max())
    return {
        "cosine": _cosine(device, bench),
        "max_abs_error": float(abs_err.max()),  # NaN where either side holds one, as np.max
        "max_rel_error": max_rel if max_rel >= 0 else 0.0,
        "mean_rel_error": float(judged.mean()) if judged.numel() else 0.0,
        "rmse": math.sqrt(mse),
        "small_value_error_ratio": small_errors / small_count if small_count else 0.0,
        "max_ulp_error": _max_ulp(device, bench, name),
        "within_thousandth": int((rel_err_origin < THOUSANDTH).sum()) / size,
    }


def _cosine(device, bench) -> float | None:
    """msprobe's cosine_sim: both sides scaled by their largest magnitude; None (msprobe leaves it
    blank) for a single element or a side that is all zeros; NaN where the data holds a NaN."""
    import torch

    if device.numel() == 1:
        return None
    tiny = torch.finfo(torch.float64).eps
    device_max, bench_max = float(device.abs().max()), float(bench.abs().max())
    if device_max <= tiny or bench_max <= tiny:
        return None
    n = device.to(torch.float64) / device_max
    b = bench.to(torch.float64) / bench_max
    cosine = float(n.dot(b) / (n.norm() * b.norm()))
    return cosine if math.isnan(cosine) else min(max(cosine, -1.0), 1.0)


def _max_ulp(device, bench, dtype: str) -> float | None:
    """msprobe's get_ulp_err: the error in units of the oracle's last place in ``dtype``, the
    difference rounded to float32 (float64 for float32 outputs); None where msprobe defines none."""
    import torch

    if dtype not in ULP_PARAMETERS:
        return None
    min_eb, mantissa = ULP_PARAMETERS[dtype]
    abs_bench = bench.abs()
    eb = torch.where(abs_bench == 0, 0.0, torch.floor(torch.log2(abs_bench))).clamp_min(min_eb)
    work = torch.float64 if dtype == "float32" else torch.float32
    diff = (device.to(work).to(bench.dtype) - bench).to(work)
    ulp = (diff * torch.exp2(-eb + mantissa).to(work)).abs()
    return float(ulp.max())


def worse(name: str, a: float | None, b: float | None) -> float | None:
    """The worse of two values of statistic ``name`` (NaN is the worst; None is no value)."""
    if a is None or b is None:
        return b if a is None else a
    if math.isnan(a) or math.isnan(b):
        return math.nan
    return min(a, b) if name in LOWER_IS_WORSE else max(a, b)


class Collector:
    """The statistics of one case's comparisons, per output dtype: the worst of each, the count of
    comparisons and of elements compared (what tells two runs' cases drew the same inputs)."""

    def __init__(self):
        self.by_dtype: dict[str, dict] = {}

    def add(self, dtype: str, stats: dict, elements: int) -> None:
        into = self.by_dtype.setdefault(dtype, {"comparisons": 0, "elements": 0})
        into["comparisons"] += 1
        into["elements"] += elements
        for name in NAMES:
            into[name] = worse(name, into.get(name), stats[name]) if name in into else stats[name]


_active: list[Collector] = []


@contextlib.contextmanager
def collecting():
    """Gather the statistics of the direct comparisons made inside (``note``), innermost first."""
    collector = Collector()
    _active.append(collector)
    try:
        yield collector
    finally:
        _active.remove(collector)


def active() -> bool:
    return bool(_active)


def note(dtype, stats: dict | None, elements: int) -> None:
    """Add one comparison's statistics (``compute``) to the innermost ``collecting``."""
    if stats is not None and _active:
        _active[-1].add(str(dtype).removeprefix("torch."), stats, elements)


def case_record(collector: Collector | None, error=None) -> dict | None:
    """What a case's record keeps (results version 5, ``statistics``): the failing comparison's
    statistics when ``error`` (a ConformanceError) carries them, else the worst of each over the
    case's comparisons; None when no comparison against the oracle was made."""
    failing = getattr(error, "statistics", None)
    if failing is not None:
        dtype, stats = failing
        return {"basis": FAILING, "dtypes": {dtype: stats}}
    if collector is None or not collector.by_dtype:
        return None
    return {"basis": WORST, "dtypes": collector.by_dtype}


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def line(record: dict | None) -> str | None:
    """``statistics (msprobe; reported, not judged), float16, failing comparison: cosine 0.9998,
    max abs 0.0123, ...``: one line per record, or None."""
    if not record or not record.get("dtypes"):
        return None
    parts = []
    for dtype, stats in record["dtypes"].items():
        values = ", ".join(f"{LABELS[n]} {_shown(stats.get(n))}" for n in NAMES)
        parts.append(f"{dtype}: {values}")
    return f"statistics (msprobe's, reported, not judged; {record.get('basis')}): " + "; ".join(parts)
