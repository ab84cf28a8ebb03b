"""``opconform diff``'s error ratios: two runs on the same inputs (an NPU report and a GPU report of
the same seed), each case's errors against the oracle, NEW's over OLD's, as msprobe's NPU/GPU
comparison takes them (spec/tolerances.md, TOL-STATISTICS): reported, never judged.

Cases pair by their key without the backend and device (``pair_key``): a case of
``test_x[acme-npu-tanh]`` and one of ``test_x[acme-cuda-tanh]`` are the same property on the same
draws when both runs gave the same ``--hypothesis-seed`` (or the derandomized ci profile). A ratio
is given only where both records count the same number of comparisons of the same number of elements
(a failed property's record counts none: its failing example is its own); otherwise the pair says
why not. Torch-free.
"""

from __future__ import annotations

import math
from collections import defaultdict

from conformance import statistics

# msprobe's NPU/GPU ratios (BenchmarkPrecisionCompare): these statistics, NEW / max(OLD, floor).
RATIO_NAMES = ("small_value_error_ratio", "rmse", "max_rel_error", "mean_rel_error")


def pair_key(result: dict) -> str:
    """A case's key without its backend and device: the node id with the ``BACKEND-DEVICE`` (or
    ``BACKEND``) parameter id the suite puts first removed, and its model in a profile run."""
    nodeid, backend, device = result["nodeid"], result.get("backend"), result.get("device")
    base, bracket, params = nodeid.partition("[")
    if bracket and backend:
        for prefix in (f"{backend}-{device}", backend):
            rest = params[len(prefix) :]
            if params.startswith(prefix) and rest[:1] in ("-", "]"):
                rest = rest[1:] if rest[:1] == "-" else rest
                nodeid = base if rest == "]" else f"{base}[{rest}"
                break
    return node_key({**result, "nodeid": nodeid})


def column(result: dict) -> str:
    return f"{result.get('backend') or '-'}@{result.get('device') or '-'}"


def keyed(old: list[dict], new: list[dict]) -> tuple[dict, dict, bool]:
    """The two runs' cases by key: by node id, or, when the runs hold different columns and each
    holds one case per ``pair_key`` (one backend@device each, as an NPU and a GPU run of one
    backend), by ``pair_key``; and whether the second way was taken."""
    columns = {column(r) for r in old}, {column(r) for r in new}
    if columns[0] != columns[1]:
        by_pair = [defaultdict(list), defaultdict(list)]
        for side, results in zip(by_pair, (old, new), strict=True):
            for result in results:
                side[pair_key(result)].append(result)
        if all(len({r["nodeid"] for r in cases}) == 1 for side in by_pair for cases in side.values()):
            first, second = ({key: cases[-1] for key, cases in side.items()} for side in by_pair)
            return first, second, True
    return ({node_key(r): r for r in old}, {node_key(r): r for r in new}, False)


def node_key(result: dict) -> str:
    """A case: its node id, its model in a profile run (the generic case is another one), and in a
    merge of runs with different product tuples, its run's (DEV-PRODUCT)."""
    key = result["nodeid"] + (f" [{result['model']}]" if result.get("model") else "")
    return key + (f" {{{result['product']}}}" if result.get("product") else "")


def ratio(new: float, old: float, dtype: str) -> float:
    """msprobe's calc_ratio: |new| / max(|old|, the dtype's minimum error); NaN where either is
    infinite or NaN (msprobe's check_inf_or_nan)."""
    if not (math.isfinite(new) and math.isfinite(old)):
        return math.nan
    return abs(new) / max(abs(old), statistics.MINIMUM_ERROR.get(dtype, statistics.DEFAULT_MINIMUM_ERROR))


def case_ratios(old: dict, new: dict) -> dict:
    """One pair's ratios per dtype both compared, or why there are none (``why``)."""
    a, b = old.get("statistics"), new.get("statistics")
    if not a or not b:
        return {"why": "no statistics on " + ("both sides" if not a and not b else "OLD" if not a else "NEW")}
    found, why = {}, None
    for dtype in a["dtypes"].keys() & b["dtypes"].keys():
        x, y = a["dtypes"][dtype], b["dtypes"][dtype]
        if "comparisons" not in x or "comparisons" not in y:
            why = "a failed property's statistics are of its own failing example: not the other run's inputs"
            continue
        if (x["comparisons"], x.get("elements")) != (y["comparisons"], y.get("elements")):
            why = (f"{dtype}: {x.get('comparisons')} comparisons of {x.get('elements')} elements in OLD, "
                   f"{y.get('comparisons')} of {y.get('elements')} in NEW: not the same inputs")  # fmt: skip
            continue
        found[dtype] = {n: ratio(y[n], x[n], dtype) for n in RATIO_NAMES if x.get(n) is not None}
    if not found:
        return {"why": why or "no dtype compared in both runs"}
    return {"ratios": found}


def error_ratios(old: dict, new: dict) -> list[dict]:
    """Every case both documents hold (``keyed``), with its ratios (``case_ratios``)."""
    before, after, _ = keyed(old["results"], new["results"])
    pairs = []
    for key in sorted(before.keys() & after.keys()):
        was, now = before[key], after[key]
        if not (was.get("statistics") or now.get("statistics")):
            continue  # neither side compared against the oracle (a metamorphic or bad-input case)
        pairs.append({"key": key, "columns": (column(was), column(now)), **case_ratios(was, now)})
    return pairs


def largest(pair: dict) -> float:
    """A pair's largest finite ratio (-1 without one): what orders the lines."""
    values = [v for r in (pair.get("ratios") or {}).values() for v in r.values() if math.isfinite(v)]
    return max(values, default=-1.0)


def lines(pairs: list[dict]) -> list[str]:
    """The diff's section: pairs whose NEW has a larger error first (largest ratio first), then a
    count of the others and of the pairs without a ratio, each with its reason."""
    if not pairs:
        return []
    labels = statistics.LABELS
    with_ratio = sorted((p for p in pairs if "ratios" in p), key=lambda p: (-largest(p), p["key"]))
    larger = [p for p in with_ratio if largest(p) > 1]
    out = [f"error ratios, NEW / OLD against the oracle (msprobe's NPU/GPU ratios; reported, not judged): "
           f"{len(with_ratio)} of {len(pairs)} paired cases on the same inputs, {len(larger)} with a ratio "
           "above 1:"]  # fmt: skip
    for pair in larger:
        old_column, new_column = pair["columns"]
        shown = "; ".join(
            f"{dtype} " + ", ".join(f"{labels[n]} {v:.3g}" for n, v in values.items())
            for dtype, values in sorted(pair["ratios"].items())
        )
        out.append(f"  {pair['key']} ({old_column} -> {new_column}): {shown}")
    if len(with_ratio) > len(larger):
        out.append(f"  {len(with_ratio) - len(larger)} other paired case(s): every ratio at most 1")
    for pair in pairs:
        if "why" in pair:
            out.append(f"  {pair['key']}: no ratio: {pair['why']}")
    return out
