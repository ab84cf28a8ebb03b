"""The capture folder: ``index.json`` plus the safetensors shards holding the calls' tensors
(docs/capture.md; ``shard_bytes=1``: one file per call).

A tensor is stored as its view: the span of storage the view reaches (``storage_offset`` to its
last element, flat and contiguous) under one safetensors key, and ``size``, ``stride`` and
``storage_offset`` in the index, so a transposed or sliced input comes back with the strides the
kernel saw. No pickle anywhere: safetensors holds raw arrays (the staged shards are written in its
format by ``write_flat``, read back by safetensors itself) and the index is JSON. Every error
reading a folder is a ``CaptureError``, one line naming the file.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import torch

from conformance.results import read_json

SCHEMA = "opconform-capture"
FORMAT = 1
INDEX = "index.json"


def suite_version() -> str:
    """The installed opconform version, written into every index and required on reading."""
    try:
        return metadata.version("opconform")
    except metadata.PackageNotFoundError:
        return "unknown"


class CaptureError(ValueError):
    """A capture folder, index entry or call file that cannot be read; the message names the file."""


def view_span(tensor: torch.Tensor) -> int:
    """The number of storage elements the view reaches from its storage offset (0 when empty)."""
    if tensor.numel() == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride(), strict=True))


def host_view(tensor: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """A host copy of the storage span ``tensor`` reaches and the view's metadata (size, stride, offset)."""
    span = view_span(tensor)
    flat = torch.as_strided(tensor.detach(), (span,), (1,), tensor.storage_offset())
    meta = {
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "size": list(tensor.shape),
        "stride": list(tensor.stride()),
        "storage_offset": tensor.storage_offset(),
        "device": str(tensor.device),
    }
    return flat.to("cpu", copy=True), meta


def rebuild(flat: torch.Tensor, meta: dict, source: str) -> torch.Tensor:
    """The recorded view over ``flat`` (offset 0 in the stored span)."""
    size, stride = meta.get("size"), meta.get("stride")
    dtype = getattr(torch, str(meta.get("dtype")), None)
    if not isinstance(dtype, torch.dtype):
        raise CaptureError(f"{source}: unknown dtype {meta.get('dtype')!r}")
    if flat.dtype != dtype:
        raise CaptureError(f"{source}: stored dtype {flat.dtype}, index says {dtype}")
    if not (isinstance(size, list) and isinstance(stride, list) and len(size) == len(stride)):
        raise CaptureError(f"{source}: size/stride missing or of different lengths")
    need = 0 if math.prod(size) == 0 else 1 + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    if flat.dim() != 1 or flat.numel() < need:
        raise CaptureError(f"{source}: stored span has {flat.numel()} elements, the view needs {need}")
    return torch.as_strided(flat, size, stride, 0)


@dataclass
class Entry:
    """One recorded call: the op, the layer and its call number, the tensors and the options."""

    file: str
    op: str
    layer: str
    call: int  # the layer's call number (0-based), counted over every call, recorded or not
    options: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)  # argument name -> view metadata (+ "key")
    outputs: list = field(default_factory=list)  # view metadata per output (+ "key")
    nbytes: int = 0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def write_shard(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    save_file(tensors, str(path))


# safetensors' names of the dtypes it stores (its format's "dtype" field)
SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL", torch.complex64: "C64",
}  # fmt: skip


def write_flat(path: Path, layout: list[tuple[str, torch.dtype, int]], pieces: list) -> None:
    """A safetensors file of flat tensors written by hand: ``layout`` gives each tensor's key, dtype
    (in ``SAFETENSORS_DTYPES``) and byte count in file order, ``pieces`` the buffers (numpy uint8
    views of the host copies, no copy) whose concatenation is the data. The format: the header's
    length (8 bytes, little-endian), the JSON header padded with spaces to a multiple of 8, then
    the tensors back to back (safetensors allows no holes). Each piece is one ``write``, which
    releases the GIL (``save_file`` runs Python per tensor first, holding it)."""
    header, at = {}, 0
    for name, dtype, nbytes in layout:
        header[name] = {
            "dtype": SAFETENSORS_DTYPES[dtype], "shape": [nbytes // dtype.itemsize],
            "data_offsets": [at, at + nbytes],
        }  # fmt: skip
        at += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(text)))
        file.write(text)
        for piece in pieces:
            file.write(piece)


def encode_entry(entry: Entry) -> str:
    """An entry as its JSON text: a recorder keeps strings, which the garbage collector does not
    track (thousands of live dicts made every collection, and so every recorded call, slower)."""
    return json.dumps(entry.to_dict())


def write_index(folder: Path, entries: list[str], stats: dict) -> Path:
    """The index of the JSON-encoded ``entries`` (``encode_entry``), one call a line."""
    head = {"schema": SCHEMA, "format": FORMAT, "suite_version": suite_version(), **stats}
    text = json.dumps(head, indent=1)[:-2] + ',\n "calls": [\n' + ",\n".join(entries) + "\n ]\n}\n"
    path = folder / INDEX
    path.write_text(text, encoding="utf-8")
    return path


def read_index(folder: str | Path) -> tuple[dict, list[Entry | CaptureError]]:
    """The index and its entries; an entry that is malformed is a CaptureError in its place.
    A folder without an index, or from another format or suite version, raises CaptureError."""
    path = Path(folder) / INDEX
    missing = f"no capture index (is {folder} a capture folder?)"
    index = read_json(path, CaptureError, missing=missing, kind="capture index")
    if not isinstance(index, dict) or index.get("schema") != SCHEMA:
        raise CaptureError(f'{path}: not a capture index (expected "schema": "{SCHEMA}")')
    version, mine = index.get("suite_version"), suite_version()
    if index.get("format") != FORMAT or version != mine:
        raise CaptureError(
            f"{path}: written by opconform {version!r} (format {index.get('format')!r}); "
            f"this is opconform {mine!r} (format {FORMAT}): capture again with this version"
        )
    calls = index.get("calls")
    if not isinstance(calls, list):
        raise CaptureError(f'{path}: no "calls" list')
    entries: list[Entry | CaptureError] = []
    for i, raw in enumerate(calls):
        try:
            entries.append(Entry(**raw))
        except TypeError as exc:
            entries.append(CaptureError(f"{path}: calls[{i}]: malformed entry: {exc}"))
    return index, entries


def read_call(folder: str | Path, entry: Entry) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """The call's inputs (name -> tensor, with the recorded strides) and outputs."""
    from safetensors import SafetensorError, safe_open

    path = Path(folder) / entry.file
    try:
        with safe_open(str(path), framework="pt") as shard:
            keys = set(shard.keys())

            def view(meta, what):
                key = meta.get("key") if isinstance(meta, dict) else None
                if key not in keys:
                    raise CaptureError(
                        f"{path}: no tensor {key!r} for {what} ({entry.layer} call {entry.call})"
                    )
                return rebuild(shard.get_tensor(key), meta, f"{path}: {what}")

            inputs = {name: view(meta, f"input {name}") for name, meta in entry.inputs.items()}
            outputs = [view(meta, f"output {i}") for i, meta in enumerate(entry.outputs)]
    except FileNotFoundError:
        raise CaptureError(f"{path}: file missing (index entry {entry.layer} call {entry.call})") from None
    except (SafetensorError, OSError, ValueError) as exc:
        if isinstance(exc, CaptureError):
            raise
        raise CaptureError(f"{path}: unreadable safetensors file: {' '.join(str(exc).split())}") from None
    return inputs, outputs
