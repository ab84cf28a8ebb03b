"""Judge recorded calls against the oracles: the results document of ``opconform replay``.

Each call becomes one case of the results document ``opconform run`` writes
(``conformance.results``), so merge, diff, the matrix and the HTML read it: its clause is the
op's row of ``REPLAY_OPS``, its column ``SOURCE@DEVICE`` (the capture's source and the device
the call ran on, or the rerun backend and device), its node id names the layer and the call.
A call that cannot be read is a skipped case whose reason names the file; no other case is lost.
Rerun on a backend, a call of an op the backend lacks is *not implemented*, never a failure; a
device that is absent, or a backend whose ``unavailable`` raises or refuses the device, is one
line (``ReplayRefused``) before any call is judged. Each failure's rerun is the command that
replays exactly that call (``--case ID``, ``ID`` its node id).
"""

from __future__ import annotations

import platform
import shlex
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from backends import not_implemented_reason
from conformance import statistics
from conformance.checks import assert_close
from conformance.devices import KNOWN_DEVICE_TYPES, absent_reason
from conformance.errors import ConformanceError
from conformance.results import Case, Document, Failure, Outcome, assign_levels
from opconform.capture.ops import REPLAY_OPS, ReplayOp
from opconform.capture.recorder import WRITTEN
from opconform.capture.store import CaptureError, Entry, read_call, read_index


def compare(row: ReplayOp, inputs: dict, options: dict, outputs: list, *, context: str, device=None) -> None:
    """Raise ConformanceError under ``row.clause`` unless every output matches the oracle (or the
    row's own judge accepts them)."""
    host = {name: t.cpu() for name, t in inputs.items()}
    if row.judge is not None:
        row.judge(host, row.call_options(options), outputs, clause=row.clause, context=context)
        return
    if len(outputs) != len(row.outputs):
        raise ConformanceError(row.clause, f"{context}: {len(outputs)} output(s), expected {row.outputs}")
    expected = row.expected(host, options)
    scales = row.scales(host, options)
    keep = row.rows(host, options)
    dtype = row.tolerance_dtype(host, options)
    for name, got, want, scale in zip(row.outputs, outputs, expected, scales, strict=True):
        if keep is not None and got.shape == want.shape:
            rows = keep[:, None, :, None]
            got, want = torch.where(rows, got.detach().cpu(), 0), torch.where(rows, want, 0)
        assert_close(
            got, want, clause=row.clause, family=row.family, atol_scale=scale,
            context=f"{context}: {name}", dtype=dtype, device=device,
        )  # fmt: skip


class ReplayRefused(ValueError):
    """Replay cannot start: a bad ``--case``, an absent device, a backend that cannot run there."""


class DeviceAbsent(ReplayRefused):
    """The device to rerun on is absent here (``opconform replay`` exits 3)."""


def case_id(entry: Entry) -> str:
    """The node id of a recorded call's case, what ``--case`` selects."""
    return f"replay::{entry.layer}::call{entry.call}::{entry.op}"


def device_problem(device: str) -> ReplayRefused | None:
    """Why ``device`` (``cpu``, ``cuda``, ``npu``, optionally ``:INDEX``) cannot be rerun on:
    ``DeviceAbsent`` when its type or index is absent here, else ``ReplayRefused``; None when it can."""
    kind, colon, index = str(device).partition(":")
    if kind not in KNOWN_DEVICE_TYPES or (colon and not index.isdigit()):
        return ReplayRefused(
            f"--device {device}: expected one of {', '.join(KNOWN_DEVICE_TYPES)}, optionally :INDEX"
        )
    reason = absent_reason(kind)
    if reason is None and colon and kind != "cpu":
        count = getattr(torch, kind).device_count()
        reason = None if int(index) < count else f"{count} {kind} device(s) here, so no index {index}"
    return None if reason is None else DeviceAbsent(f"requested device absent: {device} ({reason})")


def backend_problem(backend, device: str) -> str | None:
    """Why ``backend`` cannot be rerun on ``device``: its ``unavailable`` refuses it or raises."""
    try:
        reason = backend.unavailable(torch.device(device))
    except Exception as exc:  # the backend's own bug, said once, not a failure of every call
        error = " ".join(f"{type(exc).__name__}: {exc}".split())
        return f"backend {backend.name!r}: its unavailable({device}) raised {error}"
    return None if not reason else f"backend {backend.name!r} is unavailable on {device}: {reason}"


def _case(entry: Entry, column: tuple[str, str], **fields) -> Case:
    return Case(
        nodeid=case_id(entry),
        backend=column[0],
        device=column[1],
        op=entry.op,
        **fields,
    )


def judge_entry(
    folder, entry: Entry, source: str, backend=None, device: str = "cpu", rerun: list[str] | None = None
) -> Case:
    """The case of one recorded call: the recorded output judged, or ``backend`` rerun on its inputs.
    ``rerun``: the command words before ``--case ID`` in a failure's rerun line."""
    row = REPLAY_OPS.get(entry.op)
    recorded_device = (entry.outputs[0].get("device") if entry.outputs else None) or "cpu"
    column = (backend.name, device) if backend is not None else (source, recorded_device)
    start = time.time()
    if row is None:
        reason = f"op {entry.op!r} is not replayable (opconform.capture.ops.NOT_REPLAYABLE)"
        return _case(entry, column, outcome=Outcome.SKIPPED, reason=reason, start=start)
    lacking = None if backend is None else not_implemented_reason(backend, entry.op)
    if lacking:
        return _case(
            entry, column, outcome=Outcome.NOT_IMPLEMENTED, reason=lacking, clauses=row.clauses, start=start
        )
    command = shlex.join([*(rerun or ["opconform", "replay", str(folder)]), "--case", case_id(entry)])
    try:
        inputs, outputs = read_call(folder, entry)
    except CaptureError as exc:
        return _case(
            entry, column, outcome=Outcome.SKIPPED, reason=str(exc), clauses=row.clauses, start=start
        )
    context = f"layer {entry.layer} call {entry.call}: {entry.op} on {column[0]}@{column[1]}"

    def rerun_backend():
        on_device = {name: t.to(device, copy=True) for name, t in inputs.items()}  # it may write them
        args, keywords = row.arguments(on_device, entry.options)
        result = getattr(backend, entry.op)(*args, **row.call_options(entry.options), **keywords)
        if entry.op in WRITTEN:  # an in-place op: its outputs are what it wrote
            result = [on_device[n] for n in WRITTEN[entry.op] if n in on_device]
        return list(result) if isinstance(result, (tuple, list)) else [result]

    example = {"arguments": {"layer": entry.layer, "call": str(entry.call), "file": entry.file}}
    return judged(
        row, inputs, entry.options, outputs, context=context, command=command, example=example,
        start=start, make_case=lambda **fields: _case(entry, column, **fields),
        rerun=None if backend is None else rerun_backend, device=None if backend is None else device,
    )  # fmt: skip


def judged(
    row: ReplayOp, inputs: dict, options: dict, outputs: list, *, context: str, command: str, example: dict,
    start: float, make_case, rerun=None, device=None,
) -> Case:  # fmt: skip
    """The case of one call judged under ``row``'s clause: PASSED, or FAILED with the violation
    (``rerun``: returns the outputs of a backend rerun in place of the recorded ``outputs``; its
    exception is a failure under the row's clause). ``make_case(**fields)`` builds the Case (its
    node id, column and op); ``command`` is the failure's rerun line, ``example`` its arguments."""
    dtype = row.tolerance_dtype(inputs, options)
    dtype = None if dtype is None else str(dtype).removeprefix("torch.")
    collector = None
    try:
        if rerun is not None:
            outputs = rerun()
        with statistics.collecting() as collector:  # TOL-STATISTICS, beside the verdict
            compare(row, inputs, options, outputs, context=context, device=device)
    except ConformanceError as exc:
        failure = Failure(
            clause=exc.clause,
            dtype=dtype,
            largest_abs_error=exc.max_abs_error,
            largest_rel_error=exc.max_rel_error,
            message=str(exc),
            largest_violation=exc.violation,
            example=example,
            rerun=command,
        )
        return make_case(
            outcome=Outcome.FAILED, clauses=row.clauses, dtype=dtype,
            failure=failure, message=str(exc), start=start, duration=time.time() - start,
            statistics=statistics.case_record(collector, exc),
        )  # fmt: skip
    except Exception as exc:  # the backend's own error on a recorded input, or a bad recorded argument
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        failure = Failure(
            clause=row.clause,
            dtype=dtype,
            error=error,
            message=f"[{row.clause}] {context}: {error}",
            rerun=command,
        )
        return make_case(outcome=Outcome.FAILED, clauses=row.clauses, dtype=dtype,
                         failure=failure, message=failure.message, start=start)  # fmt: skip
    return make_case(outcome=Outcome.PASSED, clauses=row.clauses, dtype=dtype, start=start,
                     duration=time.time() - start, statistics=statistics.case_record(collector))  # fmt: skip


def selected(entries: list, cases, folder) -> list:
    """The entries ``cases`` (node ids, ``case_id``) name, in the index's order (all when None);
    ReplayRefused naming the first id that is no call of the capture."""
    if cases is None:
        return entries
    ids = {case_id(e) for e in entries if isinstance(e, Entry)}
    for wanted in cases:
        if wanted not in ids:
            example = f" such as {min(ids)}" if ids else ""
            raise ReplayRefused(f"--case {wanted}: no call of capture {folder} has this id (ids look like "
                                f"replay::LAYER::callN::OP{example})")  # fmt: skip
    return [e for e in entries if isinstance(e, Entry) and case_id(e) in set(cases)]


def results_document(cases: list[Case], *, started: float, meta: dict) -> Document:
    """The results document of judged ``cases`` (``opconform run``'s schema: merge, diff and the
    report read it), the clauses they name from spec/ and ``meta`` after the host's facts."""
    from conformance import spec_index

    judged = {c for case in cases for c in case.clauses}
    clauses = {k: v for k, v in spec_index.load_clauses().items() if k in judged}
    return Document(
        results=assign_levels(cases, clauses),
        clauses={c.id: c.record() for c in clauses.values()},
        backends=sorted({c.backend for c in cases if c.backend}),
        devices=sorted({c.device for c in cases if c.device}),
        exitstatus=1 if any(c.outcome == Outcome.FAILED for c in cases) else 0,  # MUST failures
        duration=time.time() - started,
        meta={
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(),
            "torch": torch.__version__,
            **meta,
        },
    )


def replay(
    folder: str | Path, *, backend=None, device: str = "cpu", cases=None, rerun: list[str] | None = None
) -> tuple[Document, list[str]]:
    """The results document of every call in capture ``folder`` (only those ``cases`` names, when
    given) and the one-line problems found (unreadable entries or files). ``rerun``: the command
    words before ``--case ID`` in a failure's rerun line (default ``opconform replay FOLDER``, with
    ``--backend NAME --device DEVICE`` when rerun on a backend). Raises CaptureError when the
    folder itself is refused, ReplayRefused (DeviceAbsent) when the rerun cannot start."""
    started = time.time()
    index, entries = read_index(folder)
    entries = selected(entries, cases, folder)
    if backend is not None:
        refused = device_problem(device)
        if refused is not None:
            raise refused
        problem = backend_problem(backend, device)
        if problem:
            raise ReplayRefused(problem)
        if rerun is None:
            rerun = ["opconform", "replay", str(folder), "--backend", backend.name, "--device", device]
    source = str(index.get("source") or "captured")
    cases, problems = [], []
    for i, entry in enumerate(entries):
        if isinstance(entry, CaptureError):
            problems.append(str(entry))
            cases.append(Case(nodeid=f"replay::index::calls[{i}]", outcome=Outcome.SKIPPED, reason=str(entry),
                              backend=backend.name if backend else source, device=device))  # fmt: skip
            continue
        case = judge_entry(folder, entry, source, backend, device, rerun)
        if case.outcome == Outcome.SKIPPED and "not replayable" not in (case.reason or ""):
            problems.append(case.reason)
        cases.append(case)
    meta = {"capture": str(folder), "capture_suite_version": index.get("suite_version")}
    document = results_document(cases, started=started, meta=meta)
    return document, problems
