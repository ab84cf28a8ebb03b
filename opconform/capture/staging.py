"""Host staging for ``Capture``: recorded tensors copied into two reused host buffers (docs/capture.md).

Each recorded tensor's storage span (``store.view_span``) is copied into the current buffer at
the next 64-byte boundary: a contiguous host tensor's bytes by one ``memmove`` (ctypes releases
the GIL; a fifth of the dispatch of torch's ``copy_``, which the others take: strided views, lazy
conjugates and negations, other devices, tensor subclasses). A shard is the tensors of the calls
finished since the last flush, written by the background writer straight from the buffer while
the model fills the other one.
A buffer is reused only once its shard is on disk, so after the first two the model's copies
land in memory already mapped (a fresh host allocation per tensor page-faults on every call,
which cost more than the copy itself). Memory held: the two buffers (``capacity`` bytes each) and
the tensors too big for a buffer, copied on their own into the shard being gathered.

A staged tensor (``Staging.stage``) is one plain tuple: its view's fields (name, dtype, ndim,
*size, *stride, storage offset, device), then its slot, where the copy lives: ``(buffer, start,
nbytes, dtype, loose)``, ``buffer`` 0 or 1 (``LOOSE``: the copy is the tensor ``loose``). A
recorded call is held as one flat tuple of numbers and strings (its record: a head, then its
staged tensors in a row; the options as JSON text), which the garbage collector stops tracking:
one object per call, not a dozen, keeps the full collections a long capture triggers rare and
cheap (they scan every live object of the process; with nested dicts and lists per call they
cost more than the copies, 8 -> 25 us a call). No pickle: the writer writes the safetensors
format itself, raw arrays after a JSON header (``store.write_flat``).
"""

from __future__ import annotations

import ctypes
import sys
import time

import torch

from opconform.capture.store import SAFETENSORS_DTYPES, view_span, write_flat, write_shard

ALIGN = 64
LOOSE = -1
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # no subclass: its data_ptr may not be the bytes it shows
_memmove = ctypes.memmove


_DTYPES = {d: str(d).removeprefix("torch.") for d in vars(torch).values() if isinstance(d, torch.dtype)}
# a record: (number, shard, op, layer, call, options as JSON text or None, nbytes, inputs, outputs),
# then the tensors
HEAD = 9


def _spans(record: tuple):
    """(side, at, end) of each tensor of a record, inputs first: ``record[at:end]`` are its view's
    fields and ``record[end:end + 5]`` its slot (the one reading of the record layout)."""
    at = HEAD
    for side, count in (("in", record[7]), ("out", record[8])):
        for _ in range(count):
            end = at + 5 + 2 * record[at + 2]
            yield side, at, end
            at = end + 5


def tensors(record: tuple):
    """(side, name, view metadata, slot) of each tensor of a record, inputs first."""
    for side, at, end in _spans(record):
        name, dtype, ndim = record[at : at + 3]
        size, stride = record[at + 3 : at + 3 + ndim], record[at + 3 + ndim : at + 3 + 2 * ndim]
        meta = {"dtype": dtype, "size": list(size), "stride": list(stride), "storage_offset": record[end - 2],
                "device": record[end - 1]}  # fmt: skip
        yield side, name, meta, record[end : end + 5]


def _flat(tensor: torch.Tensor, span: int) -> torch.Tensor:
    """The ``span`` storage elements from the view's storage offset, as a flat view."""
    return torch.as_strided(tensor, (span,), (1,), tensor.storage_offset())


def key(number: int, side: str, name: str) -> str:
    return f"c{number:06d}.{side}.{name}"


def _slots(record: tuple):
    """(side, name, slot) of each tensor of a record, inputs first (``tensors`` without the views)."""
    for side, at, end in _spans(record):
        yield side, record[at], record[end : end + 5]


def _write(path, buffer: torch.Tensor | None, records: list) -> None:
    """Write one shard: the tensors of ``records`` (``Capture._finish``); the ones not loose lie in
    ``buffer``. Written by hand (``store.write_flat``) with one write per run of tensors adjacent in
    the buffer; a dtype outside its table, or a big-endian host, goes through ``store.write_shard``."""
    if sys.byteorder != "little":  # the format is little-endian; save_file swaps the bytes
        return _write_with_safetensors(path, buffer, records)
    host = None if buffer is None else buffer.numpy()
    layout, pieces, run = [], [], None  # run: the [begin, end) of the buffer not yet in pieces
    for record in records:
        for side, name, (where, start, nbytes, dtype, loose) in _slots(record):
            if dtype not in SAFETENSORS_DTYPES:
                return _write_with_safetensors(path, buffer, records)
            layout.append((key(record[0], side, name), dtype, nbytes))
            if where != LOOSE and run is not None and run[1] == start:
                run[1] = start + nbytes
                continue
            if run is not None:
                pieces.append(host[run[0] : run[1]])
                run = None
            if where == LOOSE:
                pieces.append(loose.view(torch.uint8).numpy())
            else:
                run = [start, start + nbytes]
    if run is not None:
        pieces.append(host[run[0] : run[1]])
    write_flat(path, layout, pieces)


def _timed_write(path, buffer: torch.Tensor | None, records: list) -> tuple[float, float]:
    """``_write``, returning its wall and CPU seconds: the writer's pace (benchmarks.capture_overhead)."""
    wall, cpu = time.perf_counter(), time.thread_time()
    _write(path, buffer, records)
    return time.perf_counter() - wall, time.thread_time() - cpu


def _write_with_safetensors(path, buffer: torch.Tensor | None, records: list) -> None:
    out = {}
    for record in records:
        for side, name, (where, start, nbytes, dtype, loose) in _slots(record):
            view = loose if where == LOOSE else buffer.narrow(0, start, nbytes).view(dtype)
            out[key(record[0], side, name)] = view
    write_shard(path, out)


class Staging:
    """Two host buffers of ``capacity`` bytes (allocated on first use; ``prefault`` touches them
    now, only the first where it holds the ``whole`` byte budget), the shard being gathered, and
    ``writer``, the single background thread."""

    def __init__(self, capacity: int, writer, path_of, *, prefault: bool = False, whole: bool = False):
        self.capacity, self.writer, self.path_of = capacity, writer, path_of
        self.buffers: list[torch.Tensor | None] = [None, None]
        self.busy = [None, None]  # the pending write reading each buffer
        self.current, self.cursor = 0, 0
        self.typed: dict[torch.dtype, torch.Tensor] = {}  # the current buffer viewed per dtype
        self.items: list[tuple] = []  # the shard being gathered: the records of its calls
        self.size = 0
        self.open_slots: dict[int, list] = {}  # the staged tensors of each call between begin and finish
        self.writes: list = []
        self.waited = 0.0  # seconds the model waited for the writer to free a buffer
        if prefault and capacity:  # a buffer that holds the whole budget needs no second one
            self.buffers = [torch.zeros(capacity, dtype=torch.uint8) for _ in range(1 if whole else 2)]
            self.buffers += [None] * (2 - len(self.buffers))
        self.addresses = [None if b is None else b.data_ptr() for b in self.buffers]

    def _buffer(self) -> torch.Tensor:
        """The current buffer, allocated on first use."""
        buffer = self.buffers[self.current]
        if buffer is None:
            buffer = self.buffers[self.current] = torch.empty(self.capacity, dtype=torch.uint8)
            self.addresses[self.current] = buffer.data_ptr()
        return buffer

    def _address(self) -> int:
        """The current buffer's address (``stage``'s memmove destination)."""
        self._buffer()
        return self.addresses[self.current]

    def _typed(self, dtype: torch.dtype) -> torch.Tensor:
        """The current buffer viewed as ``dtype``, made once per buffer and dtype."""
        typed = self.typed[dtype] = self._buffer().view(dtype)
        return typed

    def stage(self, name: str, tensor: torch.Tensor) -> tuple:
        """A host copy of ``tensor``'s storage span (the call's input before it runs, or an output):
        the staged tensor, its view's fields named ``name`` and then its slot (module docstring)."""
        if tensor.requires_grad:
            tensor = tensor.detach()
        shape, stride, dtype = tensor.shape, tensor.stride(), tensor.dtype
        contiguous = tensor.is_contiguous()  # the span is the view itself: one copy_ in its shape
        span = tensor.numel() if contiguous else view_span(tensor)
        size = tensor.element_size()
        nbytes = span * size
        meta = (name, _DTYPES[dtype], len(shape), *shape, *stride, tensor.storage_offset(),
                "cpu" if tensor.is_cpu else str(tensor.device))  # fmt: skip
        if nbytes == 0 or nbytes > self.capacity:
            flat = tensor.reshape(-1) if contiguous else _flat(tensor, span)
            return meta + (LOOSE, 0, nbytes, dtype, flat.to("cpu", copy=True))
        start = (self.cursor + ALIGN - 1) // ALIGN * ALIGN
        if start + nbytes > self.capacity:
            self.flush()
            start = 0
        as_they_lie = contiguous and tensor.is_cpu and type(tensor) in _PLAIN
        if as_they_lie and not (tensor.is_conj() or tensor.is_neg()):
            _memmove((self.addresses[self.current] or self._address()) + start, tensor.data_ptr(), nbytes)
        else:
            typed = self.typed.get(dtype)
            if typed is None:
                typed = self._typed(dtype)
            if contiguous:  # the destination in the tensor's own shape: no flat view of the source
                torch.as_strided(typed, shape, stride, start // size).copy_(tensor)
            else:  # a strided view, a lazy conjugate or negation, another device, a tensor subclass
                torch.as_strided(typed, (span,), (1,), start // size).copy_(_flat(tensor, span))
        self.cursor = start + nbytes
        return meta + (self.current, start, nbytes, dtype, None)

    def release(self, staged: list) -> None:
        """A call dropped after its copies: the buffer space is reused when it was the last taken."""
        for tensor in reversed(staged):
            where, start, nbytes = tensor[-5:-2]
            if where == self.current and start + nbytes == self.cursor:
                self.cursor = start

    def flush(self) -> None:
        """Hand the gathered shard to the writer and switch buffers (waiting until the other
        buffer's last shard is written); the open calls' copies move out of the buffer handed over."""
        old = self.buffers[self.current]
        if self.items:
            future = self.writer.submit(_timed_write, self.path_of(len(self.writes)), old, self.items)
            self.writes.append(future)
            self.busy[self.current] = future
            self.items, self.size = [], 0
        for staged in self.open_slots.values():  # a call still running (its inputs staged, not its output)
            for i, tensor in enumerate(staged):
                where, start, nbytes, dtype, _ = tensor[-5:]
                if where == self.current:
                    copy = old.narrow(0, start, nbytes).view(dtype).clone()
                    staged[i] = tensor[:-5] + (LOOSE, 0, nbytes, dtype, copy)
        self.current, self.typed = 1 - self.current, {}
        if self.busy[self.current] is not None:
            started = time.perf_counter()
            self.busy[self.current].result()
            self.busy[self.current] = None
            self.waited += time.perf_counter() - started
        self.cursor = 0
