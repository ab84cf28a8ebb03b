"""``opconform export``: golden cases a kernel test reads without Python (docs/capture.md, Export).

One folder per case, ``case_NNNN/``, holding ``case.json`` (the sidecar: op, clause, options,
the tolerance rule, and per array its file, dtype and shape) and the arrays: with ``--format bin``
headerless raw files in C order (``input_<name>.bin``, ``golden_<k>.bin``, ``allowed_<k>.bin``),
the Ascend C samples' ``np.tofile`` convention; with ``--format safetensors`` one ``case.safetensors``.
``golden`` is the oracle's output rounded to the case's dtype, ``allowed`` the per-element
allowed absolute error (float64): the op's tolerance rule evaluated on this case's inputs. A
harness writes ``output_<k>.bin`` (or ``outputs.safetensors``) per case for ``opconform judge``.

Nothing is mixed: a non-empty ``out`` is refused unless ``overwrite``, which removes the earlier
export's ``case_NNNN/`` folders first (a folder holding anything else is refused even then). The
export's room on disk (its files in whole blocks) is estimated before anything is written, from
the first generated case or the capture index's shapes, and one past ``max_bytes`` is refused.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import torch

from conformance.tolerances import tolerance
from opconform.capture.ops import REPLAY_OPS
from opconform.capture.store import Entry, read_call, read_index, suite_version

CASE_SCHEMA = "opconform-case"
CASE_FORMAT = 1
FORMATS = ("bin", "safetensors")
DTYPES = ("float32", "float16", "bfloat16", "float64")
MAX_BYTES = 256 << 20  # the default bound on an export's estimated size (--max-bytes)
CASE_FOLDER = re.compile(r"case_\d{4,}")
SIDECAR_BYTES = 2048  # the estimate's allowance for a case.json written from a capture
SAFETENSORS_HEADER = 128  # the estimate's allowance per array in a safetensors header
BLOCK = 4096  # a file system's usual block: the room a small file takes on disk


def size_text(nbytes: float) -> str:
    """``884.2 MiB``: a byte count for one line."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def allowed_error(row, inputs: dict, options: dict, expected: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per output, atol * scale + rtol * |expected| (float64), inf on rows the clause does not compare."""
    tol = tolerance(row.family, row.tolerance_dtype(inputs))
    keep = row.rows(inputs, options)
    result = []
    for want, scale in zip(expected, row.scales(inputs, options), strict=True):
        atol = tol.atol if scale is None else tol.atol * scale.double()
        allowed = (atol + tol.rtol * want.abs()).expand_as(want).clone()
        if keep is not None and allowed.dim() == 4:
            allowed = torch.where(keep[:, None, :, None], allowed, float("inf"))
        result.append(allowed)
    return result


def _chosen_calls(row, count: int, from_capture) -> list[Entry]:
    """The first ``count`` readable calls of the op in the capture (its index only, no tensor)."""
    _, entries = read_index(from_capture)
    chosen = [e for e in entries if isinstance(e, Entry) and e.op == row.op][:count]
    if not chosen:
        raise ValueError(f"--from-capture {from_capture}: no readable call of op {row.op!r}")
    return chosen


def _case(row, plan, from_capture, dtype: torch.dtype):
    """(inputs, options, where it came from) of one planned case: a seed or a capture's call."""
    if from_capture is None:
        inputs, options = row.sample(torch.Generator().manual_seed(plan), dtype)
        return inputs, options, {"seed": plan}
    inputs, _ = read_call(from_capture, plan)
    return inputs, plan.options, {"capture": str(from_capture), "layer": plan.layer, "call": plan.call}


def _numel_bytes(meta: dict, dtype: torch.dtype | None = None) -> int:
    dtype = dtype or getattr(torch, str(meta.get("dtype")), torch.float64)
    return math.prod(meta.get("size") or []) * dtype.itemsize


def _disk_bytes(arrays: list[int], sidecar: int, fmt: str) -> int:
    """A case folder's room on disk: its files (one per array for ``bin``, one safetensors file
    with a small header per array otherwise, and case.json) and the folder, in whole blocks."""
    files = arrays if fmt == "bin" else [sum(arrays) + SAFETENSORS_HEADER * len(arrays)]
    return BLOCK * (1 + sum(-(-n // BLOCK) for n in [*files, sidecar]))


def _call_bytes(row, entry: Entry, fmt: str) -> int:
    """An exported case's room on disk from a capture index entry: the inputs, and per output
    its golden (in the case's dtype) and its allowed error (float64), and the sidecar."""
    name = row.dtype_from or row.tensors[0]
    meta = entry.inputs.get(name)
    case_dtype = getattr(torch, str(meta.get("dtype")), torch.float64) if isinstance(meta, dict) else None
    arrays = [_numel_bytes(m) for m in entry.inputs.values() if isinstance(m, dict)]
    outputs = [m for m in entry.outputs if isinstance(m, dict)]
    arrays += [_numel_bytes(m, case_dtype) for m in outputs] + [
        _numel_bytes(m, torch.float64) for m in outputs
    ]
    return _disk_bytes(arrays, SIDECAR_BYTES, fmt)


def _check_out(out: Path, overwrite: bool) -> list[Path]:
    """The earlier export's case folders to remove; refuses a file, or a non-empty folder without
    ``overwrite`` or holding anything but case folders."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a folder")
    held = sorted(out.iterdir()) if out.is_dir() else []
    if not held:
        return []
    if not overwrite:
        raise ValueError(
            f"--out {out}: not empty ({len(held)} entries, e.g. {held[0].name}); pass --overwrite to "
            "replace the cases there, or choose an empty folder"
        )
    other = [p for p in held if not (p.is_dir() and CASE_FOLDER.fullmatch(p.name))]
    if other:
        raise ValueError(
            f"--out {out}: --overwrite replaces only an earlier export's case_NNNN/ folders, and "
            f"{other[0].name} is not one; choose an empty folder"
        )
    return held


def _payload(row, op: str, inputs: dict, options: dict, origin: dict, fmt: str):
    """(sidecar, arrays): the case's sidecar and its arrays by name, contiguous on the host."""
    expected = row.expected(inputs, options)
    case_dtype = row.tolerance_dtype(inputs)
    files: dict = {}

    def array(name: str, tensor: torch.Tensor) -> dict:
        tensor = tensor.detach().cpu().contiguous()
        meta = {"dtype": _dtype_name(tensor.dtype), "shape": list(tensor.shape)}
        if fmt == "bin":
            meta["file"] = f"{name}.bin"
        else:
            meta["file"], meta["key"] = "case.safetensors", name
        files[name] = tensor
        return meta

    sidecar = {
        "schema": CASE_SCHEMA, "format": CASE_FORMAT, "suite_version": suite_version(),
        "op": op, "clause": row.clause, "tolerance_family": row.family, "options": options,
        "layout": "C order, little-endian, no header", "origin": origin,
        "inputs": {n: array(f"input_{n}", t) for n, t in inputs.items()},
        "golden": [array(f"golden_{k}", want.to(case_dtype)) for k, want in enumerate(expected)],
        "allowed": [
            array(f"allowed_{k}", a) for k, a in enumerate(allowed_error(row, inputs, options, expected))
        ],
        "outputs": [
            {"name": name, "file": f"output_{k}.bin" if fmt == "bin" else "outputs.safetensors",
             "key": f"output_{k}", "dtype": _dtype_name(case_dtype), "shape": list(expected[k].shape)}
            for k, name in enumerate(row.outputs)
        ],
    }  # fmt: skip
    return sidecar, files


def _payload_bytes(sidecar: dict, files: dict) -> int:
    """The bytes of a case's files (its arrays and case.json)."""
    return len(json.dumps(sidecar, indent=1)) + sum(t.numel() * t.element_size() for t in files.values())


def _write_case(folder: Path, sidecar: dict, files: dict, fmt: str) -> int:
    """Write one case folder (case.json last: a folder without it is an interrupted export); its bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "bin":
        for name, tensor in files.items():
            raw = tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
            (folder / f"{name}.bin").write_bytes(raw)
    elif files:
        from safetensors.torch import save_file

        save_file(files, str(folder / "case.safetensors"))
    (folder / "case.json").write_text(json.dumps(sidecar, indent=1), encoding="utf-8")
    return _payload_bytes(sidecar, files)


def export_cases(
    op: str, *, out, fmt: str = "bin", cases: int = 4, clause: str | None = None, from_capture=None,
    dtype: str = "float32", overwrite: bool = False, max_bytes: int | None = MAX_BYTES, progress=None,
) -> list[Path]:  # fmt: skip
    """Write ``cases`` golden cases of ``op`` under ``out``; returns the case folders. ``progress``
    (if given) is called after each case with (cases written, cases in all, bytes written)."""
    if op not in REPLAY_OPS:
        raise ValueError(f"--op {op}: not exportable; exportable ops: {sorted(REPLAY_OPS)}")
    row = REPLAY_OPS[op]
    if row.judge is not None:
        raise ValueError(
            f"--op {op}: not exportable: {row.clause} judges it by its own check (routing up to slot "
            "order and ties, a write bit for bit, quantized values on the grid of their own scale, a "
            "GEMM's tolerance row by out_dtype), not a per-element allowed error"
        )
    if clause is not None and clause != row.clause:
        raise ValueError(f"--clause {clause}: op {op} is judged under {row.clause}")
    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt}: expected one of {FORMATS}")
    if not isinstance(cases, int) or isinstance(cases, bool) or cases < 1:
        raise ValueError(f"--cases {cases}: expected an int >= 1")
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype}: expected one of {DTYPES}")
    if not isinstance(overwrite, bool):
        raise ValueError(f"overwrite: expected a bool, got {overwrite!r}")
    if max_bytes is not None and (
        not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1
    ):
        raise ValueError(f"--max-bytes {max_bytes}: expected an int >= 1 (or None: no bound)")
    if from_capture is None and row.sample is None:
        raise ValueError(f"--op {op}: no generated cases for this op; export it --from-capture DIR")
    out, torch_dtype = Path(out), getattr(torch, dtype)
    stale = _check_out(out, overwrite)
    # the plan and its size, before anything is written or removed
    first = None
    if from_capture is None:
        plans = list(range(cases))
        first = _payload(row, op, *_case(row, 0, None, torch_dtype), fmt)
        sidecar, arrays = first
        room = _disk_bytes(
            [t.numel() * t.element_size() for t in arrays.values()], len(json.dumps(sidecar, indent=1)), fmt
        )
        estimate = room * cases
    else:
        plans = _chosen_calls(row, cases, from_capture)
        estimate = sum(_call_bytes(row, entry, fmt) for entry in plans)
    if max_bytes is not None and estimate > max_bytes:
        raise ValueError(
            f"--max-bytes {max_bytes}: this export would take about {size_text(estimate)} on disk "
            f"({len(plans)} cases, about {size_text(estimate / len(plans))} each), more than "
            f"{size_text(max_bytes)}; pass a larger --max-bytes to write it"
        )
    for folder in stale:  # --overwrite: the earlier cases go before any new one is written
        shutil.rmtree(folder)
    written, nbytes = [], 0
    for i, plan in enumerate(plans):
        folder = out / f"case_{i:04d}"
        if i == 0 and first is not None:  # the generated case the estimate was made from
            payload = first
        else:
            payload = _payload(row, op, *_case(row, plan, from_capture, torch_dtype), fmt)
        nbytes += _write_case(folder, *payload, fmt)
        written.append(folder)
        if progress is not None:
            progress(len(written), len(plans), nbytes)
    return written
