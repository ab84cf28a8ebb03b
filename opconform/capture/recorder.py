"""``Capture``: record the calls a live model makes to its kernels (docs/capture.md).

Attach to a module (``attach``: forward pre-hook and hook) or wrap a function (``wrap``) with a
``mapping`` from the call to the op's arguments: ``mapping(module, args, kwargs) -> dict`` for a
module, ``mapping(*args, **kwargs) -> dict`` for a function, giving every argument of the op by
its oracle's name (tensors and options). Inputs are copied to the host *before* the call (an
in-place kernel would change them), the output after it (for an in-place op returning None,
``WRITTEN`` names the arguments recorded again after the call); nothing the model computes changes.
Bounded by ``max_calls_per_op``, ``sample_rate`` (seeded) and ``byte_budget``: a call that does
not fit is counted as dropped, and nothing is written past the budget. The host copies go into
two reused buffers of ``shard_bytes / 2`` (``staging``); each buffer's calls are one shard,
written by one background thread while the model fills the other, so the model waits only for
the copies, unless the writer falls a buffer behind (``shard_bytes`` >= 2 * ``byte_budget``: one
buffer holds every call, written at ``close()``; ``shard_bytes=1``: one file per call).
``prefault=True`` touches the buffers (only the first where it holds the whole budget) at
construction, so the model's first calls do not page-fault them in. The index's JSON is built at
``close()``, off the model's path.

A folder that already holds a capture (an index or shards) is refused unless ``overwrite=True``,
which removes that capture's files first, so two captures never mix. Each site's mapping is
checked against the op's protocol signature at its first call (a key the op does not take, an
argument without a default left out): one line there, not a failure of every call at replay.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from opconform.capture.staging import Staging, key, tensors
from opconform.capture.store import INDEX, Entry, encode_entry, write_index

# In-place ops returning None: their outputs are these arguments as the call left them (the inputs
# are recorded before it), so replay judges what the kernel wrote (KV-WRITE, bit for bit).
WRITTEN = {"write_kv_cache": ("k_cache", "v_cache")}


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _dtype_name(value) -> str:
    """A torch.dtype option (int8_scaled_mm's out_dtype) is recorded by its name, "bfloat16"."""
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _outputs(output) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in output):
        return list(output)
    raise TypeError(f"output: expected a tensor or a tuple of tensors, got {type(output).__name__}")


def _held_capture(folder: Path) -> list[Path]:
    """The files of a capture already in ``folder``: its index and shards (none: no capture there)."""
    if not folder.is_dir():
        return []
    index = folder / INDEX
    return ([index] if index.exists() else []) + sorted(folder.glob("shard_*.safetensors"))


def _signature_problem(op: str, arguments: dict) -> str | None:
    """Why a mapping's ``arguments`` cannot be a call of ``op`` (its protocol signature in
    ``backends.protocols``): a key it does not take, an argument without a default left out."""
    from backends import FAMILIES, OPS

    signature = inspect.signature(getattr(FAMILIES[OPS[op]], op))
    params = list(signature.parameters.values())[1:]  # self
    if any(p.kind == p.VAR_KEYWORD for p in params):  # dpm_scheduler(**config): any option
        return None
    params = [p for p in params if p.kind != p.VAR_POSITIONAL]
    shown = f"{op}({', '.join(p.name for p in params)})"
    unknown = [key for key in arguments if key not in {p.name for p in params}]
    if unknown:
        return f"{op} has no argument {unknown[0]!r}; the mapping must give {shown} by these names"
    missing = [p.name for p in params if p.default is p.empty and p.name not in arguments]
    if missing:
        return f"argument {missing[0]!r} of {shown} is missing (it has no default)"
    return None


class _Site:
    """What one attached module or named function records as, made once (not per call): the op,
    the layer, the op's ``WRITTEN`` names and the counters it shares, ``[n]`` lists: its layer's
    calls and its op's recorded calls; ``checked``: its mapping's keys were checked (first call)."""

    __slots__ = ("op", "layer", "written", "calls", "recorded", "checked")

    def __init__(self, op: str, layer: str, written, calls: list, recorded: list):
        self.op, self.layer, self.written, self.calls, self.recorded = op, layer, written, calls, recorded
        self.checked = False


class Capture:
    """A capture into folder ``out``; use as a context manager or call ``close()`` to write the index."""

    def __init__(
        self,
        out: str | Path,
        *,
        max_calls_per_op: int = 100,
        sample_rate: float = 1.0,
        byte_budget: int = 1 << 30,
        seed: int = 0,
        source: str = "captured",
        shard_bytes: int = 64 << 20,
        prefault: bool = False,
        overwrite: bool = False,
    ):
        _require(
            isinstance(max_calls_per_op, int) and max_calls_per_op >= 0,
            f"max_calls_per_op: expected an int >= 0, got {max_calls_per_op!r}",
        )
        _require(
            isinstance(sample_rate, (int, float)) and 0.0 <= sample_rate <= 1.0,
            f"sample_rate: expected a number in [0, 1], got {sample_rate!r}",
        )
        _require(
            isinstance(byte_budget, int) and byte_budget >= 0,
            f"byte_budget: expected an int >= 0, got {byte_budget!r}",
        )
        _require(
            isinstance(source, str) and bool(source), f"source: expected a non-empty str, got {source!r}"
        )
        _require(
            isinstance(shard_bytes, int) and shard_bytes >= 1,
            f"shard_bytes: expected an int >= 1, got {shard_bytes!r}",
        )
        _require(isinstance(prefault, bool), f"prefault: expected a bool, got {prefault!r}")
        _require(isinstance(overwrite, bool), f"overwrite: expected a bool, got {overwrite!r}")
        _require(
            isinstance(out, (str, os.PathLike)) and str(out) != "",
            f"out: expected a folder path, got {out!r}",
        )
        self.out = Path(out)
        _require(not self.out.exists() or self.out.is_dir(), f"out: {out} exists and is not a folder")
        held = _held_capture(self.out)
        _require(
            overwrite or not held,
            f"out: {out} already holds a capture ({held[0].name if held else ''}); "
            "pass overwrite=True to replace it, or choose another folder",
        )
        try:
            for path in held:  # the index first: a half-removed folder is no longer a capture
                path.unlink()
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"out: {out}: {exc.strerror or exc}") from None
        self.max_calls_per_op, self.sample_rate, self.byte_budget = max_calls_per_op, sample_rate, byte_budget
        self.source = source
        self._random = random.Random(seed)
        # per recorded call its record, a flat tuple (staging.tensors reads it);
        # JSON only at close, off the model's path
        self._records: list[tuple] = []
        self.bytes_written = 0
        self.dropped = {"per_op_limit": 0, "sampling": 0, "byte_budget": 0}
        self._per_op: dict[str, list[int]] = {}  # per op: [its calls recorded]
        self._calls: dict[str, list[int]] = {}  # per layer: [its calls]
        self._sites: dict[tuple[str, str], _Site] = {}
        self._handles: list = []
        self._pending: dict[int, tuple] = {}
        self.shard_bytes = shard_bytes
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="opconform-capture")
        self._staging = Staging(
            min(shard_bytes // 2, byte_budget), self._writer,
            lambda number: self.out / f"shard_{number:06d}.safetensors", prefault=prefault,
            whole=shard_bytes // 2 >= byte_budget,
        )  # fmt: skip

    # -- recording -----------------------------------------------------------------------------
    def _site(self, op: str, layer: str) -> _Site:
        site = self._sites.get((op, layer))
        if site is None:
            calls, recorded = self._calls.setdefault(layer, [0]), self._per_op.setdefault(op, [0])
            site = self._sites[op, layer] = _Site(op, layer, WRITTEN.get(op), calls, recorded)
        return site

    def _begin(self, site: _Site, arguments: dict):
        """Decide whether this call is recorded; if so, the host copies of its tensor inputs."""
        if not site.checked:  # the mapping's keys against the op's signature, once per site
            self._check_mapping(site, arguments)
        calls = site.calls
        call = calls[0]
        calls[0] = call + 1
        if site.recorded[0] >= self.max_calls_per_op:
            self.dropped["per_op_limit"] += 1
            return None
        if self.sample_rate < 1.0 and self._random.random() >= self.sample_rate:
            self.dropped["sampling"] += 1
            return None
        if not isinstance(arguments, dict):
            raise TypeError(
                f"mapping for {site.layer!r}: expected a dict of {site.op} arguments, got {arguments!r}"
            )
        stage, staged, options = self._staging.stage, [], {}
        self._staging.open_slots[id(staged)] = staged
        for name, value in arguments.items():
            if isinstance(value, torch.Tensor):
                staged.append(stage(name, value))
            else:
                options[name] = value
        written = site.written
        if written is not None:  # the tensors an in-place op writes, recorded again after the call
            written = [arguments[n] for n in written if isinstance(arguments.get(n), torch.Tensor)]
        return call, options, staged, written

    def _check_mapping(self, site: _Site, arguments) -> None:
        if not isinstance(arguments, dict):
            raise TypeError(
                f"mapping for {site.layer!r}: expected a dict of {site.op} arguments, got {arguments!r}"
            )
        problem = _signature_problem(site.op, arguments)
        if problem:
            raise TypeError(f"mapping for {site.layer!r}: {problem}")
        site.checked = True

    def _abandon(self, started) -> None:
        if started is not None:
            self._staging.open_slots.pop(id(started[2]), None)

    def _finish(self, site: _Site, started, output) -> None:
        if started is None:
            return
        call, options, staged, written = started
        inputs, staging = len(staged), self._staging
        try:
            if written is None and isinstance(output, torch.Tensor):
                staged.append(staging.stage("0", output))
            else:
                for i, tensor in enumerate(_outputs(output) if written is None else written):
                    staged.append(staging.stage(str(i), tensor))
        finally:
            del staging.open_slots[id(staged)]
        nbytes = 0
        for tensor in staged:
            nbytes += tensor[-3]
        if self.bytes_written + nbytes > self.byte_budget:
            self.dropped["byte_budget"] += 1
            staging.release(staged)
            return
        text = None  # the options as JSON text: a dict in the record would keep the GC tracking it
        if options:
            try:
                text = json.dumps(options, default=_dtype_name)
            except TypeError as exc:
                staging.release(staged)
                layer = site.layer
                raise TypeError(
                    f"mapping for {layer!r}: options must be JSON values (str, number, bool, None) or a "
                    f"torch.dtype: {exc}"
                ) from None
        # one flat tuple per call (staging.tensors reads it): the garbage collector stops tracking it
        record = (len(self._records), len(staging.writes), site.op, site.layer, call, text, nbytes, inputs,
                  len(staged) - inputs)  # fmt: skip
        for tensor in staged:
            record += tensor
        self._records.append(record)
        staging.items.append(record)
        staging.size += nbytes
        self.bytes_written += nbytes
        site.recorded[0] += 1
        if staging.size >= self.shard_bytes:
            staging.flush()

    # -- attaching -----------------------------------------------------------------------------
    def attach(self, module: torch.nn.Module, op: str, mapping, *, name: str | None = None, output=None):
        """Record ``module``'s calls as calls of ``op``; ``output(result)`` picks the op's output
        from the module's result (default: the result). Returns ``module``."""
        _op_name(op)
        _require(isinstance(module, torch.nn.Module), f"module: expected a torch.nn.Module, got {module!r}")
        _require(callable(mapping), f"mapping: expected a callable, got {mapping!r}")
        site = self._site(op, name or f"{type(module).__name__}@{id(module):x}")
        begin, finish, pending, where = self._begin, self._finish, self._pending, id(module)

        def pre(mod, args, kwargs):
            pending[where] = begin(site, mapping(mod, args, kwargs))

        def post(mod, args, kwargs, result):
            finish(site, pending.pop(where, None), output(result) if output else result)

        self._handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        self._handles.append(module.register_forward_hook(post, with_kwargs=True))
        return module

    def wrap(self, function, op: str, mapping, *, name, output=None):
        """``function`` wrapped so that each call is recorded as a call of ``op`` named ``name``
        (a str, or a callable of the call's arguments giving it: one attention function serving
        every layer names each call by its layer)."""
        _op_name(op)
        _require(
            callable(name) or (isinstance(name, str) and bool(name)), f"name: expected a str, got {name!r}"
        )
        _require(callable(function), f"function: expected a callable, got {function!r}")
        _require(callable(mapping), f"mapping: expected a callable, got {mapping!r}")

        fixed = None if callable(name) else self._site(op, name)

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            site = self._site(op, name(*args, **kwargs)) if callable(name) else fixed
            started = self._begin(site, mapping(*args, **kwargs))
            try:
                result = function(*args, **kwargs)
            except BaseException:
                self._abandon(started)
                raise
            self._finish(site, started, output(result) if output else result)
            return result

        return wrapper

    # -- closing -------------------------------------------------------------------------------
    def close(self) -> Path:
        """Remove the hooks and write the index; returns its path."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for started in self._pending.values():  # a module whose forward raised: its hook never ran
            self._abandon(started)
        self._pending.clear()
        self._staging.flush()
        self._writer.shutdown(wait=True)
        for write in self._staging.writes:
            write.result()  # a write that failed (a full disk) raises here
        stats = {"source": self.source, "bytes": self.bytes_written, "dropped": dict(self.dropped)}
        stats["limits"] = {
            "max_calls_per_op": self.max_calls_per_op,
            "sample_rate": self.sample_rate,
            "byte_budget": self.byte_budget,
        }
        return write_index(self.out, [encode_entry(_entry(record)) for record in self._records], stats)

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _entry(record: tuple) -> Entry:
    """The index entry of one recorded call (``Capture._finish``'s record)."""
    number, shard, op, layer, call, options, nbytes = record[:7]
    options = json.loads(options) if options else {}
    inputs, outputs = {}, []
    for side, name, meta, _ in tensors(record):
        meta["key"] = key(number, side, name)
        if side == "in":
            inputs[name] = meta
        else:
            outputs.append(meta)
    return Entry(f"shard_{shard:06d}.safetensors", op, layer, call, options, inputs, outputs, nbytes)


def _op_name(op) -> None:
    from backends import OPS

    if op not in OPS:
        raise ValueError(f"op: unknown op {op!r}; known ops: {sorted(OPS)}")
