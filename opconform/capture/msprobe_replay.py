"""``opconform replay --from msprobe DUMP_DIR``: judge an msprobe dump's calls under their ops'
clauses (spec/ascend.md, MSPROBE-DUMP, MSPROBE-MAP).

Every forward call of an API in ``msprobe_map.MAPPINGS`` becomes one case of the results
document ``opconform run`` writes (``judge.results_document``), judged by ``judge.judged`` as a
captured call is: its clause the op's row of ``REPLAY_OPS``, its column ``msprobe@dump``, its
node id ``msprobe::WHERE::NAME`` (WHERE the dump.json's folder below DUMP_DIR without a lone
``procPID``, NAME the msprobe record, e.g. ``msprobe::step0::NPU.npu_rms_norm.0.forward``).
Every other record is counted and listed, never judged: an API without a contract op
(``unmapped``), a backward record, or a call of a mapped API outside its op's arguments
(``outside``, with the reason).
A call whose tensor file cannot be read is a skipped case naming the file; no other case is lost.
"""

from __future__ import annotations

import shlex
import time
from collections import Counter
from pathlib import Path

from conformance.results import Case, Document, Outcome
from opconform.capture.judge import judged, results_document
from opconform.capture.msprobe_dump import Call, decode, dump_places, find_dumps, read_dump
from opconform.capture.msprobe_map import MAPPINGS, Unmapped, map_call
from opconform.capture.ops import REPLAY_OPS
from opconform.capture.store import CaptureError

COLUMN = ("msprobe", "dump")  # the matrix column: msprobe's dump records no device


def case_id(call: Call) -> str:
    """The node id of an msprobe call's case, what ``--case`` selects."""
    return f"msprobe::{call.where}::{call.name}"


def _judge(call: Call, folder, start: float) -> Case | str:
    """The call's case, or the reason it is outside its op (a string: listed, not judged)."""
    make = dict(nodeid=case_id(call), backend=COLUMN[0], device=COLUMN[1])
    try:
        args, kwargs = decode(call.args, call), {k: decode(v, call) for k, v in call.kwargs.items()}
        outputs = decode(call.output, call)
        mapped = map_call(call.api, args, kwargs, outputs)
    except CaptureError as exc:
        return Case(**make, op=call.api, outcome=Outcome.SKIPPED, reason=str(exc), start=start)
    except Unmapped as exc:
        return str(exc)
    row = REPLAY_OPS[mapped.op]
    command = shlex.join(["opconform", "replay", "--from", "msprobe", str(folder), "--case", case_id(call)])
    context = f"msprobe {call.where}/{call.name}: {call.api} as {mapped.op}"
    dump = str(call.folder / "dump.json")
    example = {"arguments": {"msprobe call": call.name, "dump": dump, "op": mapped.op}}
    return judged(
        row, mapped.inputs, mapped.options, mapped.outputs, context=context, command=command,
        example=example, start=start, make_case=lambda **fields: Case(**make, op=mapped.op, **fields),
    )  # fmt: skip


def replay_msprobe(folder: str | Path, *, cases=None) -> tuple[Document, list[str], dict]:
    """The results document of an msprobe dump folder's mapped calls (only those ``cases`` names,
    when given), the one-line problems (unreadable records or files) and what was not judged:
    ``{"unmapped": {API: calls}, "outside": {reason: calls}, "backward": calls}``.
    Raises CaptureError when the folder or a dump.json is refused, ValueError for a ``--case``
    that names no mapped call."""
    started, root = time.time(), Path(folder)
    results, problems = [], []
    unmapped, outside, backward, known = Counter(), Counter(), 0, set()
    paths = find_dumps(root)
    places = dump_places(paths, root)
    for path in paths:
        _, calls = read_dump(path, places[path])
        for i, call in enumerate(calls):
            if isinstance(call, CaptureError):
                problems.append(str(call))
                results.append(Case(nodeid=f"msprobe::{places[path]}::record{i}", outcome=Outcome.SKIPPED,
                                    reason=str(call), backend=COLUMN[0], device=COLUMN[1]))  # fmt: skip
                continue
            if call.api not in MAPPINGS:
                unmapped[call.api] += 1
                continue
            if call.direction != "forward":
                backward += 1
                continue
            known.add(case_id(call))
            if cases is not None and case_id(call) not in cases:
                continue
            judged_call = _judge(call, root, time.time())
            if isinstance(judged_call, str):
                outside[judged_call] += 1
                continue
            if judged_call.outcome == Outcome.SKIPPED:
                problems.append(judged_call.reason)
            results.append(judged_call)
    for wanted in cases or ():
        if wanted not in known:
            raise ValueError(f"--case {wanted}: no mapped call of dump {folder} has this id "
                             "(ids look like msprobe::step0::NPU.npu_rms_norm.0.forward)")  # fmt: skip
    not_judged = {"unmapped": dict(sorted(unmapped.items())), "outside": dict(outside), "backward": backward}
    meta = {"capture": str(folder), "capture_format": "msprobe", "msprobe": {"not_judged": not_judged}}
    return results_document(results, started=started, meta=meta), problems, not_judged
