"""Accuracy statistics beside each verdict, defined as msprobe defines them (spec/tolerances.md,
TOL-STATISTICS): reported, never judged.

``compute`` gives one comparison's statistics (an output against its float64 oracle); while a case
runs, ``collecting`` gathers those of every direct comparison ``assert_close`` makes, and
``case_record`` is what the case's results record keeps: per output dtype, the failing comparison's
statistics, or the worst of each over the case's comparisons. Torch and numpy are imported where a
statistic is computed, so the results readers (merge, diff, render) stay torch-free.
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


def compute(actual, expected, dtype=None) -> dict | None:
    """The statistics of ``actual`` (a backend's floating-point output) against ``expected`` (its
    float64 oracle, same shape), as msprobe's api_accuracy_checker computes them on a device and a
    bench output, in numpy as it does; None for an empty or non-floating output (msprobe compares
    those bit by bit). ``dtype``: the output's dtype when ``actual`` holds its values exactly in a
    wider one."""
    import numpy as np
    import torch

    dtype = dtype or actual.dtype
    if not dtype.is_floating_point or actual.numel() == 0:
        return None
    name = str(dtype).removeprefix("torch.")
    # msprobe reads both sides of a bfloat16 output as float32 (numpy has no bfloat16) and computes
    # there; any other output meets the float64 oracle, so numpy computes in float64, where its
    # values are exact: read so here, without numpy's slow float16 arithmetic. ``narrow`` is the
    # dtype numpy holds the output in (float8 as float32), what the oracle's finiteness is read in.
    wide = torch.float32 if dtype == torch.bfloat16 else torch.float64
    narrow = {torch.float16: np.float16, torch.float64: np.float64}.get(dtype, np.float32)
    device = actual.detach().to("cpu", wide).reshape(-1).numpy()
    bench = expected.detach().to("cpu", wide).reshape(-1).numpy()
    with np.errstate(all="ignore"):  # log2 of 0, inf - inf, the oracle's overflow in float16
        abs_bench = np.abs(bench)
        abs_bench_with_eps = abs_bench + (BFLOAT16_EPS if name == "bfloat16" else np.finfo(bench.dtype).eps)
        abs_err = np.abs(device - bench)
        rel_err_origin = np.abs(abs_err / abs_bench_with_eps)
        # Benchmark metrics (msprobe BenchmarkCompare): small values and inf/NaN apart.
        inf_nan = ~(np.isfinite(device) & np.isfinite(bench.astype(narrow)))
        small = (abs_bench <= SMALL_VALUE.get(name, DEFAULT_SMALL_VALUE)) & ~inf_nan
        small_count = int(small.sum())
        small_atol = SMALL_VALUE_ATOL.get(name, DEFAULT_SMALL_VALUE_ATOL)
        small_errors = int((small & (abs_err > small_atol)).sum())
        apart = small | inf_nan
        rel_err = np.where(apart, -1, abs_err / abs_bench_with_eps)
        judged = rel_err[rel_err >= 0]
        size, excluded = abs_err.size, int(apart.sum())
        mse = np.mean(np.square(np.where(apart, 0, abs_err))) * (size / (size - excluded + 0.0001) + 0.0001)
        max_rel = float(np.max(rel_err))
        return {
            "cosine": _cosine(device, bench),
            "max_abs_error": float(np.max(abs_err)),  # NaN where either side holds one
            "max_rel_error": max_rel if max_rel >= 0 else 0.0,
            "mean_rel_error": float(np.mean(judged)) if judged.size else 0.0,
            "rmse": float(np.sqrt(mse)),
            "small_value_error_ratio": small_errors / small_count if small_count else 0.0,
            "max_ulp_error": _max_ulp(device, bench, abs_bench, name),
            "within_thousandth": int(np.sum(rel_err_origin < THOUSANDTH)) / size,
        }


def _cosine(device, bench) -> float | None:
    """msprobe's cosine_sim: both sides scaled by their largest magnitude; None (msprobe leaves it
    blank) for a single element or a side that is all zeros; NaN where the data holds a NaN."""
    import numpy as np

    if device.size == 1:
        return None
    tiny = np.finfo(float).eps
    device_max, bench_max = np.max(np.abs(device)), np.max(np.abs(bench))
    if device_max <= tiny or bench_max <= tiny:
        return None
    n, b = device.astype(float) / device_max, bench.astype(float) / bench_max
    # np.dot's BLAS call, not its sum, is what costs on small arrays (threads): the same sums, unfused.
    cosine = float(np.sum(n * b) / (np.sqrt(np.sum(n * n)) * np.sqrt(np.sum(b * b))))
    return cosine if math.isnan(cosine) else min(max(cosine, -1.0), 1.0)


def _max_ulp(device, bench, abs_bench, dtype: str) -> float | None:
    """msprobe's get_ulp_err: the error in units of the oracle's last place in ``dtype``, the
    difference rounded to float32 (float64 for float32 outputs); None where msprobe defines none."""
    import numpy as np

    if dtype not in ULP_PARAMETERS:
        return None
    min_eb, mantissa = ULP_PARAMETERS[dtype]
    eb = np.maximum(np.where(abs_bench == 0, 0, np.floor(np.log2(abs_bench))), min_eb)
    work = np.float64 if dtype == "float32" else np.float32
    ulp = (device.astype(work) - bench).astype(work) * np.exp2(-eb + mantissa).astype(work)
    return float(np.max(np.abs(ulp)))


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
    case's comparisons; None when no comparison against the oracle was made. A failure's record
    counts the comparisons and elements of ``collector`` (its case's, the failing one included)
    only when given: a replayed call's inputs are the call's, while a property's failing example
    is its own, which no other run draws (opconform.ratios then gives no ratio)."""
    failing = getattr(error, "statistics", None)
    if failing is not None:
        dtype, stats = failing
        counted = (collector.by_dtype.get(dtype) or {}) if collector is not None else {}
        counts = {k: counted[k] for k in ("comparisons", "elements") if k in counted}
        return {"basis": FAILING, "dtypes": {dtype: {**counts, **stats}}}
    if collector is None or not collector.by_dtype:
        return None
    return {"basis": WORST, "dtypes": collector.by_dtype}


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def line(record: dict | None) -> str | None:
    """``statistics (msprobe's, reported, not judged; failing comparison): float16: cosine 0.9998,
    max abs 0.0123, ...``: a record as one line (its dtypes after each other), or None."""
    if not record or not record.get("dtypes"):
        return None
    parts = []
    for dtype, stats in record["dtypes"].items():
        values = ", ".join(f"{LABELS[n]} {_shown(stats.get(n))}" for n in NAMES)
        parts.append(f"{dtype}: {values}")
    return f"statistics (msprobe's, reported, not judged; {record.get('basis')}): " + "; ".join(parts)
