"""``opconform export``: golden cases a kernel test reads without Python (docs/capture.md, Export).

One folder per case, ``case_NNNN/``, holding ``case.json`` (the sidecar: op, clause, options,
the tolerance rule, and per array its file, dtype and shape) and the arrays: with ``--format bin``
headerless raw files in C order (``input_<name>.bin``, ``golden_<k>.bin``, ``allowed_<k>.bin``),
the Ascend C samples' ``np.tofile`` convention; with ``--format safetensors`` one ``case.safetensors``.
``golden`` is the oracle's output rounded to the case's dtype, ``allowed`` the per-element
allowed absolute error (float64): the op's tolerance rule evaluated on this case's inputs. A
harness writes ``output_<k>.bin`` (or ``outputs.safetensors``) per case for ``opconform judge``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from conformance.tolerances import tolerance
from opconform.capture.ops import REPLAY_OPS
from opconform.capture.store import Entry, read_call, read_index, suite_version

CASE_SCHEMA = "opconform-case"
CASE_FORMAT = 1
FORMATS = ("bin", "safetensors")
DTYPES = ("float32", "float16", "bfloat16", "float64")


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


def _cases(row, count: int, from_capture, dtype: torch.dtype):
    """(inputs, options, where it came from) for each case."""
    if from_capture is not None:
        _, entries = read_index(from_capture)
        chosen = [e for e in entries if isinstance(e, Entry) and e.op == row.op][:count]
        if not chosen:
            raise ValueError(f"--from-capture {from_capture}: no readable call of op {row.op!r}")
        for entry in chosen:
            inputs, _ = read_call(from_capture, entry)
            yield (
                inputs,
                entry.options,
                {"capture": str(from_capture), "layer": entry.layer, "call": entry.call},
            )
        return
    if row.sample is None:
        raise ValueError(f"--op {row.op}: no generated cases for this op; export it --from-capture DIR")
    for seed in range(count):
        inputs, options = row.sample(torch.Generator().manual_seed(seed), dtype)
        yield inputs, options, {"seed": seed}


def _write_array(folder: Path, name: str, tensor: torch.Tensor, fmt: str, arrays: dict) -> dict:
    tensor = tensor.detach().cpu().contiguous()
    meta = {"dtype": _dtype_name(tensor.dtype), "shape": list(tensor.shape)}
    if fmt == "bin":
        meta["file"] = f"{name}.bin"
        (folder / meta["file"]).write_bytes(
            tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        )
    else:
        meta["file"], meta["key"] = "case.safetensors", name
        arrays[name] = tensor
    return meta


def export_cases(
    op: str, *, out, fmt: str = "bin", cases: int = 4, clause: str | None = None, from_capture=None,
    dtype: str = "float32",
) -> list[Path]:  # fmt: skip
    """Write ``cases`` golden cases of ``op`` under ``out``; returns the case folders."""
    if op not in REPLAY_OPS:
        raise ValueError(f"--op {op}: not exportable; exportable ops: {sorted(REPLAY_OPS)}")
    row = REPLAY_OPS[op]
    if row.judge is not None:
        raise ValueError(
            f"--op {op}: not exportable: {row.clause} judges it by its own check (routing up to slot "
            "order and ties, a write bit for bit), not a per-element allowed error"
        )
    if clause is not None and clause != row.clause:
        raise ValueError(f"--clause {clause}: op {op} is judged under {row.clause}")
    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt}: expected one of {FORMATS}")
    if not isinstance(cases, int) or cases < 1:
        raise ValueError(f"--cases {cases}: expected an int >= 1")
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype}: expected one of {DTYPES}")
    out = Path(out)
    written = []
    for i, (inputs, options, origin) in enumerate(_cases(row, cases, from_capture, getattr(torch, dtype))):
        folder = out / f"case_{i:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        expected = row.expected(inputs, options)
        case_dtype = row.tolerance_dtype(inputs)
        arrays: dict[str, torch.Tensor] = {}
        sidecar = {
            "schema": CASE_SCHEMA, "format": CASE_FORMAT, "suite_version": suite_version(),
            "op": op, "clause": row.clause, "tolerance_family": row.family, "options": options,
            "layout": "C order, little-endian, no header", "origin": origin,
            "inputs": {n: _write_array(folder, f"input_{n}", t, fmt, arrays) for n, t in inputs.items()},
            "golden": [
                _write_array(folder, f"golden_{k}", want.to(case_dtype), fmt, arrays)
                for k, want in enumerate(expected)
            ],
            "allowed": [
                _write_array(folder, f"allowed_{k}", a, fmt, arrays)
                for k, a in enumerate(allowed_error(row, inputs, options, expected))
            ],
            "outputs": [
                {"name": name, "file": f"output_{k}.bin" if fmt == "bin" else "outputs.safetensors",
                 "key": f"output_{k}", "dtype": _dtype_name(case_dtype), "shape": list(expected[k].shape)}
                for k, name in enumerate(row.outputs)
            ],
        }  # fmt: skip
        if arrays:
            from safetensors.torch import save_file

            save_file(arrays, str(folder / "case.safetensors"))
        (folder / "case.json").write_text(json.dumps(sidecar, indent=1), encoding="utf-8")
        written.append(folder)
    return written
