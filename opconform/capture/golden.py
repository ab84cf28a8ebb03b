"""``opconform judge``: the outputs a foreign harness wrote for exported cases, judged.

Each case folder's ``case.json`` (written by ``opconform.capture.export``) names the op, its
inputs and the outputs the harness must write; the verdict recomputes the float64 oracle from
the case's inputs and compares under the op's clause and tolerance rule, as replay does. A bad
sidecar, a truncated or missing file is one line naming the file and a skipped case; the other
cases are judged.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from conformance import statistics
from conformance.errors import ConformanceError
from conformance.results import Case, Document, Failure, Outcome, assign_levels, read_json
from opconform.capture.export import CASE_FORMAT, CASE_SCHEMA
from opconform.capture.judge import compare
from opconform.capture.ops import REPLAY_OPS
from opconform.capture.store import CaptureError, suite_version

ARRAY_DTYPES = (
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int32,
    torch.int64,
    torch.bool,
)


def _read_array(folder: Path, meta, what: str) -> torch.Tensor:
    if not isinstance(meta, dict):
        raise CaptureError(f"{folder / 'case.json'}: {what}: expected an object, got {meta!r}")
    dtype = getattr(torch, str(meta.get("dtype")), None)
    shape = meta.get("shape")
    path = folder / str(meta.get("file"))
    if dtype not in ARRAY_DTYPES:
        raise CaptureError(f"{folder / 'case.json'}: {what}: unknown dtype {meta.get('dtype')!r}")
    if not (isinstance(shape, list) and all(isinstance(n, int) and n >= 0 for n in shape)):
        raise CaptureError(f"{folder / 'case.json'}: {what}: bad shape {shape!r}")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            tensor = load_file(str(path))[meta.get("key")]
        except FileNotFoundError:
            raise CaptureError(f"{path}: missing ({what})") from None
        except (SafetensorError, KeyError, OSError) as exc:
            raise CaptureError(f"{path}: no readable tensor {meta.get('key')!r} ({what}): {exc}") from None
        if tensor.dtype != dtype or list(tensor.shape) != shape:
            raise CaptureError(
                f"{path}: {what} is {tensor.dtype} {list(tensor.shape)}, case.json says {dtype} {shape}"
            )
        return tensor
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CaptureError(f"{path}: missing ({what})") from None
    except OSError as exc:
        raise CaptureError(f"{path}: unreadable ({what}): {exc.strerror}") from None
    itemsize = torch.empty((), dtype=dtype).element_size()
    need = math.prod(shape) * itemsize
    if len(raw) != need:
        raise CaptureError(
            f"{path}: {len(raw)} bytes, {what} of dtype {meta['dtype']} and shape {shape} needs {need}"
            + (" (truncated?)" if len(raw) < need else "")
        )
    if need == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)


def read_case(folder: Path) -> dict:
    path = folder / "case.json"
    case = read_json(path, CaptureError, missing="missing (not an exported case folder)", kind="case sidecar")
    if not isinstance(case, dict) or case.get("schema") != CASE_SCHEMA:
        raise CaptureError(f'{path}: not a case sidecar (expected "schema": "{CASE_SCHEMA}")')
    if case.get("format") != CASE_FORMAT or case.get("suite_version") != suite_version():
        raise CaptureError(
            f"{path}: exported by opconform {case.get('suite_version')!r}; "
            f"this is {suite_version()!r}: export again"
        )
    if case.get("op") not in REPLAY_OPS:
        raise CaptureError(f"{path}: op {case.get('op')!r} is not judgeable")
    return case


def judge_case(folder: Path, outputs_dir: Path, source: str) -> Case:
    nodeid = f"judge::{folder.name}"
    try:
        case = read_case(folder)
        row = REPLAY_OPS[case["op"]]
        inputs = {n: _read_array(folder, m, f"input {n}") for n, m in (case.get("inputs") or {}).items()}
        outputs = [
            _read_array(outputs_dir / folder.name, m, f"output {m.get('name')}") for m in case["outputs"]
        ]
    except (CaptureError, KeyError, TypeError, AttributeError) as exc:
        reason = str(exc) if isinstance(exc, CaptureError) else f"{folder / 'case.json'}: malformed: {exc!r}"
        return Case(nodeid=nodeid, outcome=Outcome.SKIPPED, reason=reason, backend=source, device="-")
    clause, dtype = row.clause, case["outputs"][0]["dtype"] if case["outputs"] else None
    fields = dict(
        nodeid=f"{nodeid}::{case['op']}", backend=source, device="-", op=case["op"], clauses=[clause]
    )
    context = f"case {folder.name} ({case.get('origin')}): {case['op']}"
    collector = None
    try:
        with statistics.collecting() as collector:  # TOL-STATISTICS, beside the verdict
            compare(row, inputs, case.get("options") or {}, outputs, context=context)
    except ConformanceError as exc:
        failure = Failure(
            clause=exc.clause, dtype=dtype, largest_abs_error=exc.max_abs_error,
            largest_rel_error=exc.max_rel_error, message=str(exc), largest_violation=exc.violation,
        )  # fmt: skip
        return Case(outcome=Outcome.FAILED, dtype=dtype, failure=failure, message=str(exc),
                    statistics=statistics.case_record(collector, exc), **fields)  # fmt: skip
    except (TypeError, ValueError) as exc:  # a recorded option the oracle refuses
        return Case(outcome=Outcome.SKIPPED, reason=f"{folder / 'case.json'}: {exc}", **fields)
    return Case(outcome=Outcome.PASSED, dtype=dtype, statistics=statistics.case_record(collector), **fields)


def judge_outputs(cases_dir, outputs_dir, *, source: str = "harness") -> tuple[Document, list[str]]:
    """The results document of every exported case under ``cases_dir`` against ``outputs_dir``."""
    from conformance import spec_index

    started, cases_dir, outputs_dir = time.time(), Path(cases_dir), Path(outputs_dir)
    folders = sorted(p for p in cases_dir.iterdir() if p.is_dir()) if cases_dir.is_dir() else []
    if not folders:
        raise CaptureError(f"{cases_dir}: no exported case folders (case_NNNN/) there")
    results = [judge_case(folder, outputs_dir, source) for folder in folders]
    judged = {c for r in results for c in r.clauses}
    clauses = {k: v for k, v in spec_index.load_clauses().items() if k in judged}
    document = Document(
        results=assign_levels(results, clauses),
        clauses={c.id: c.record() for c in clauses.values()},
        backends=[source], devices=["-"],
        exitstatus=1 if any(r.outcome == Outcome.FAILED for r in results) else 0,
        duration=time.time() - started,
        meta={"cases": str(cases_dir), "outputs": str(outputs_dir)},
    )  # fmt: skip
    return document, [r.reason for r in results if r.outcome == Outcome.SKIPPED]
