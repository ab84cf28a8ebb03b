"""The bench's output: the terminal table, the targets' verdicts, the PNG chart, the case list."""

from __future__ import annotations

import json
import math

from benchmarks import cases as bench_cases

BASELINE = "native"  # the backend every ratio is relative to
TABLE_COLUMNS = ("case", "device", "impl", "time", "x oracle", "x native", "x peer", "peak mem", "status")


def _bytes(value) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(value)


def _seconds(value) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:.3f} ms" if value < 1 else f"{value:.2f} s"


def _times(value) -> str:
    return "-" if value is None else f"{value:.3g}x"


def format_table(document: dict) -> str:
    """The terminal table: one row per (case, device, impl) that ran or was skipped. The ratios are
    to the oracle, to ``native`` (a column only when native ran) and to the case's peer."""
    with_native = any(r.get("ratio_to_native") is not None for r in document["results"])
    columns = [c for c in TABLE_COLUMNS if with_native or c != "x native"]
    rows = [tuple(columns)]
    hidden = 0
    for r in document["results"]:
        if r["status"] == "not-implemented":
            hidden += 1
            continue
        reason = " ".join(str(r.get("reason", "")).split())  # one line, whatever the exception said
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {reason}"
        if len(status) > 90:
            status = status[:87] + "..."
        time_text = _seconds(r.get("median_s")) if r.get("time_is_absolute") else "(cpu: ratios)"
        if r["status"] != "ok":
            time_text = "-"
        cells = {
            "case": r["case"],
            "device": r["device"],
            "impl": r["impl"],
            "time": time_text,
            "x oracle": _times(r.get("ratio_to_oracle")),
            "x native": _times(r.get("ratio_to_native")),
            "x peer": _times(r.get("ratio_to_peer")),
            "peak mem": _bytes(r.get("peak_bytes")),
            "status": status,
        }
        rows.append(tuple(cells[c] for c in columns))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(columns))]
    lines = [
        "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [
        "x oracle" + (" / x native" if with_native else "") + " / x peer: median time over the float64 "
        "oracle" + (f" / over {BASELINE!r}" if with_native else "") + " / over the case's peer, same device "
        "and run (>1 = slower). Peers: "
        + (", ".join(sorted({f"{c['op']}: {c['peer']}" for c in document["cases"] if c["peer"]})) or "none"),
        "peak mem: "
        + "; ".join(
            f"{k}: {v}"
            for k, v in document["memory_methods"].items()
            if any(r.get("memory_method") == k for r in document["results"])
        ),
    ]
    if hidden:
        notes.append(
            f"{hidden} (case, backend) pairs where the backend lacks the op are left out (see JSON)."
        )
    return "\n".join(lines + [""] + notes)


def format_warnings(document: dict) -> str:
    """The warnings raised while measuring, once each, one line each (never inside the table)."""
    return "\n".join(f"warning: {line}" for line in document.get("warnings", []))


def format_targets(document: dict) -> str:
    if not document["targets"]:
        return ""
    lines = ["Oracle targets (docs/performance.md): measured vs target"]
    for t in document["targets"]:
        limit = f"<= {t['target_s']:g} s" + (
            f", <= {_bytes(t['target_peak_bytes'])}" if t["target_peak_bytes"] else ""
        )
        measured = f"{_seconds(t['measured_s'])}, peak {_bytes(t['measured_peak_bytes'])}"
        verdict = t["verdict"] + (f" ({t['reason']})" if t.get("reason") else "")
        lines.append(f"  {t['case']} [{t['device']}]: measured {measured}; target {limit}: {verdict}")
    return "\n".join(lines)


def format_relative_targets(document: dict) -> str:
    """One line per relative target: the oracle's time and peak over its baseline case's."""
    if not document.get("relative_targets"):
        return ""
    lines = ["Relative oracle targets (docs/performance.md): time and peak over the baseline case's"]
    for t in document["relative_targets"]:
        verdict = t["verdict"] + (f" ({t['reason']})" if t.get("reason") else "")
        time = f"time {_seconds(t['measured_s'])} / {_seconds(t['baseline_s'])} = {_times(t['time_ratio'])}"
        peak = f"peak {_bytes(t['measured_peak_bytes'])} / {_bytes(t['baseline_peak_bytes'])}"
        lines.append(f"  {t['case']} [{t['device']}] over {t['baseline']}:\n    {time}, {peak} = "
                     f"{_times(t['peak_ratio'])}; target <= {t['target_ratio']:g}x: {verdict}")  # fmt: skip
    return "\n".join(lines)


def write_chart(document: dict, path: str) -> str | None:
    """A PNG of the ratios (log scale), one panel per ratio kind; returns why not, when it cannot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"matplotlib not installed (the 'bench' extra): {exc}"
    ok = [r for r in document["results"] if r["status"] == "ok"]
    first = "ratio_to_native" if any(r.get("ratio_to_native") for r in ok) else "ratio_to_oracle"
    base = BASELINE if first == "ratio_to_native" else "the oracle"
    panels = [
        (first, f"time / {base} (same case, device, run)"),
        ("ratio_to_peer", "time / the case's peer"),
    ]
    height = max(3.0, 0.28 * max(1, len(ok)) + 1.5)
    fig, axes = plt.subplots(1, 2, figsize=(15, height), sharey=True)
    labels = [f"{r['case']} [{r['device']}] {r['impl']}" for r in ok]
    positions = list(range(len(ok)))
    colors = {"oracle": "tab:gray", "backend": "tab:blue", "peer": "tab:orange"}
    for ax, (key, title) in zip(axes, panels, strict=True):
        values = [r.get(key) for r in ok]
        bars = [v if v else math.nan for v in values]
        ax.barh(positions, bars, color=[colors.get(r["kind"], "tab:blue") for r in ok])
        ax.axvline(1.0, color="black", linewidth=0.8)
        if any(v for v in values):
            ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", which="both", alpha=0.3)
    axes[0].set_yticks(positions, labels, fontsize=7)
    axes[0].invert_yaxis()
    fig.suptitle(
        f"opconform bench ({document['shape_set']} shapes, {document['dtype']}; gray oracle, "
        "blue backend, orange peer; missing bar = no baseline)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def format_case_list(shape_set: str) -> str:
    lines = []
    for c in bench_cases.cases(shape_set):
        target = f"  [target <= {c.target.seconds:g} s]" if c.target else ""
        lines.append(
            f"{c.id}\n    {c.source}\n    {shape_set}: {json.dumps(c.params)}"
            f"{'  peer: ' + c.peer if c.peer else ''}{target}"
        )
    return "\n".join(lines)
