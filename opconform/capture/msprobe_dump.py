"""Read an msprobe dump folder (spec/ascend.md, MSPROBE-DUMP): its ``dump.json`` files and the
tensor files they name, never with pickle semantics.

A dump folder holds one ``dump.json`` per step and process (``stepN/procPID/`` or
``stepN/rankN/``), or is one such folder itself. Each record of its ``data`` is one call,
``PREFIX.API.N.DIRECTION`` (``NPU.npu_rms_norm.0.forward``), with ``input_args``,
``input_kwargs`` and ``output`` as msprobe's data processor describes them: a tensor is a dict
with ``type`` ``torch.Tensor``, ``dtype``, ``shape`` and the ``data_name`` of its file under
``dump_tensor_data/``; a Python value is ``{"type": ..., "value": ...}``; None is null; a tuple
or list is a JSON list. A ``.pt`` file is read by ``torch.load(weights_only=True)`` only, a
``.npy`` by numpy without ``allow_pickle``; anything else, or a tensor whose dtype or shape is
not the one dump.json gives, is a CaptureError naming the file: one call lost, no other.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from conformance.results import read_json
from opconform.capture.store import CaptureError

DUMP_JSON = "dump.json"
TENSOR_DIR = "dump_tensor_data"  # the writer's folder beside dump.json (msprobe service, dump paths)
# an API's record: PREFIX.API.N.DIRECTION (msprobe core/dump/hook_manager.py); a module's (level
# L0 or mix): Module.PATH.CLASS.DIRECTION.N (pytorch/dump/module_dump/module_processor.py)
RECORD_NAME = re.compile(r"^(?P<api>.+)\.(?P<count>\d+)\.(?P<direction>forward|backward)$")
MODULE_NAME = re.compile(
    r"^(?P<prefix>Module|Cell)\..*?(?P<cls>[^.]+)\.(?P<direction>forward|backward)\.\d+$"
)


@dataclass
class Call:
    """One record of a dump.json: its name, the API (``PREFIX.API``), the raw arguments."""

    name: str
    api: str  # a module's record: Module.CLASS
    direction: str  # "forward" or "backward"
    args: list
    kwargs: dict
    output: list
    folder: Path  # the folder of its dump.json
    where: str  # that folder below the dump folder, as case ids name it (``dump_places``)


def find_dumps(folder: str | Path) -> list[Path]:
    """The dump.json files of ``folder`` (the folder's own, or every one below it), sorted;
    CaptureError when there is none."""
    root = Path(folder)
    if not root.is_dir():
        raise CaptureError(f"{folder}: not a folder (give msprobe's dump_path or a stepN/procN folder of it)")
    own = root / DUMP_JSON
    found = [own] if own.is_file() else sorted(root.rglob(DUMP_JSON))
    if not found:
        raise CaptureError(f"{folder}: no {DUMP_JSON} in it or below it (is it an msprobe dump_path?)")
    return found


PROC_DIR = re.compile(r"^proc\d+$")


def dump_places(paths: list[Path], root: Path) -> dict[Path, str]:
    """Each dump.json's folder below ``root`` as the case ids name it: ``step0/rank3``, and
    ``step0`` for the one ``procPID`` folder of a step (a process id differs between two runs of
    one model, so their reports would share no case for ``diff``); several in a step keep their ids."""
    folders = [path.parent.relative_to(root) for path in paths]
    procs = [f.parent for f in folders if PROC_DIR.match(f.name)]
    places = {}
    for path, folder in zip(paths, folders, strict=True):
        lone = PROC_DIR.match(folder.name) and procs.count(folder.parent) == 1
        places[path] = str(folder.parent if lone else folder)
    return places


def read_dump(path: Path, where: str) -> tuple[dict, list[Call | CaptureError]]:
    """dump.json's header (everything but ``data``) and its records in file order, which is the
    order the calls ran in; a malformed record is a CaptureError in its place. A file that is not
    a dump.json of ``task`` tensor raises CaptureError: without tensor files no call can be judged."""
    data = read_json(path, CaptureError, missing="missing", kind="msprobe dump.json")
    if not isinstance(data, dict) or not isinstance(data.get("data"), dict):
        raise CaptureError(f'{path}: not an msprobe dump.json (no "data" object)')
    header = {k: v for k, v in data.items() if k != "data"}
    if header.get("task") != "tensor":
        raise CaptureError(
            f"{path}: task {header.get('task')!r} dumps no tensors; replay needs a dump of task "
            '"tensor" (msprobe config: "task": "tensor")'
        )
    calls: list[Call | CaptureError] = []
    for name, record in data["data"].items():
        module = MODULE_NAME.match(name)
        match = RECORD_NAME.match(name) if module is None else module
        if match is None or not isinstance(record, dict):
            calls.append(CaptureError(f"{path}: record {name!r}: not PREFIX.API.N.forward|backward: {{...}}"))
            continue
        args, kwargs, output = (record.get(k) for k in ("input_args", "input_kwargs", "output"))
        if not isinstance(args or [], list) or not isinstance(kwargs or {}, dict):
            calls.append(
                CaptureError(f"{path}: record {name}: input_args is no list or input_kwargs no dict")
            )
            continue
        output = output if isinstance(output, list) else [] if output is None else [output]
        api = match["api"] if module is None else f"{module['prefix']}.{module['cls']}"  # Module.LlamaRMSNorm
        calls.append(
            Call(name, api, match["direction"], args or [], kwargs or {}, output, path.parent, where)
        )
    return header, calls


def _tensor_file(path: Path) -> torch.Tensor:
    if path.suffix == ".npy":
        import numpy

        try:
            array = numpy.load(path, allow_pickle=False)
            return torch.from_numpy(array)
        except (ValueError, TypeError, OSError) as exc:  # object arrays need pickle; strings are no tensor
            raise CaptureError(f"{path}: not plain array data: {' '.join(str(exc).split())}") from None
    try:
        with warnings.catch_warnings():  # torch's note on a protocol-4 pickle: the file is judged below
            warnings.filterwarnings("ignore", "Detected pickle protocol", UserWarning)
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CaptureError(f"{path}: file missing") from None
    except Exception as exc:  # weights_only refuses what is not plain tensor data, with its own types
        why = " ".join(str(exc).split())[:160]
        raise CaptureError(
            f"{path}: not plain tensor data (torch.load(weights_only=True) refused it: {why})"
        ) from None
    if not isinstance(loaded, torch.Tensor):
        raise CaptureError(f"{path}: holds a {type(loaded).__name__}, not a tensor")
    return loaded


def load_tensor(meta: dict, call: Call) -> torch.Tensor:
    """The tensor a record's tensor entry names, checked against the dtype and shape dump.json gives."""
    name = meta.get("data_name")
    if not isinstance(name, str) or Path(name).name != name or not name:
        raise CaptureError(f"{call.folder / DUMP_JSON}: {call.name}: tensor entry without a plain data_name")
    path = call.folder / TENSOR_DIR / name
    tensor = _tensor_file(path)
    dtype, shape = meta.get("dtype"), meta.get("shape")
    if str(tensor.dtype) != dtype or list(tensor.shape) != list(shape or []):
        raise CaptureError(
            f"{path}: holds {str(tensor.dtype)} {list(tensor.shape)}, dump.json says {dtype} {shape}"
            " (a sliced or rewritten dump)"
        )
    return tensor


def decode(raw, call: Call):
    """A record's argument or output as a value: tensors loaded (``load_tensor``), Python values,
    ``torch.dtype``, ``torch.Size`` as a tuple, lists and dicts element by element."""
    if raw is None:
        return None
    if isinstance(raw, list):
        return [decode(item, call) for item in raw]
    if not isinstance(raw, dict):
        raise CaptureError(f"{call.folder / DUMP_JSON}: {call.name}: unreadable argument {raw!r:.60}")
    kind = raw.get("type")
    if kind == "torch.Tensor" or "data_name" in raw:
        return load_tensor(raw, call)
    if kind == "torch.dtype":
        return getattr(torch, str(raw.get("value", "")).removeprefix("torch."), None)
    if kind == "torch.Size":
        return tuple(raw.get("value") or ())
    if kind is not None and "value" in raw:
        return raw["value"]
    return {key: decode(value, call) for key, value in raw.items() if key != "type"}
