"""``recording``: the built-in ops (native's, else npu-emulated's or diffusers'), recording what
every op was called with (tests/test_argument_coverage.py; loaded with --backend-module).

Per op and argument (named by the protocol's signature, backends/protocols.py) it keeps the
distinct *aspects* seen: ``value`` (a scalar's or option's value, ``<omitted>`` where a defaulted
argument was left out, ``tensor`` for a tensor), and for tensors ``dtype`` and ``layout``
(contiguous or strided). A ``**config`` op records each key as an argument. A float ``scale``
beside a tensor ``q`` also records ``conventional``: whether it is 1/sqrt(q's last dim), so a suite
that only ever passes the conventional scale (a kernel ignoring the passed one would conform) is
found although the value itself varies with the head dim. Each call also records the range
measures of its op (conformance/strategies/ranges: sizes, threshold offsets, near-tie gaps, config
forms) under ``RANGES_KEY``. The record is written as JSON to ``$OPCONFORM_RECORD`` when the
process exits.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import math
import os
from collections import defaultdict
from collections.abc import Mapping

import torch
from hypothesis import settings

import backends
from backends.protocols import FAMILIES, OPS
from conformance.harness import profiles
from conformance.strategies import ranges

# Loaded as a plugin too (-p recording_backend), so the profile exists before pytest checks
# --hypothesis-profile: the ci profile's derandomized examples, fewer of them and unshrunk.
EXAMPLES = int(os.environ.get("OPCONFORM_RECORD_EXAMPLES", "10"))
settings.register_profile(
    f"{profiles.PREFIX}record",
    parent=settings.get_profile(f"{profiles.PREFIX}ci-noshrink"),
    max_examples=EXAMPLES,
)
# Whose ops are recorded: the first of these that has the op (native; the Ascend adapter's
# emulated converters; the diffusers scheduler).
SOURCES = ("native", "npu-emulated", "diffusers")

OMITTED = "<omitted>"
# op -> argument -> aspect -> distinct descriptors
RECORD: dict[str, dict[str, dict[str, set[str]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(set)))
# The range measures: op -> measure name -> distinct values, written under RANGES_KEY (no op's name).
RANGES_KEY = "(ranges)"
MEASURES = ranges.measures_by_op(ranges.all_rules())
MEASURED: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))


def describe(value) -> dict[str, str]:
    """The aspects of one argument value; a config (a mapping or an object with attributes) also
    records ``fields``, the names it carries (the second rule of the argument coverage test)."""
    if isinstance(value, Mapping):
        return {"value": f"dict:{sorted(map(str, value))}", "fields": ",".join(sorted(map(str, value)))}
    if isinstance(value, torch.Tensor):
        layout = "contiguous" if value.is_contiguous() else "strided"
        return {"value": "tensor", "dtype": str(value.dtype), "layout": layout}
    if isinstance(value, (bool, int, float, str, type(None))):
        return {"value": f"{type(value).__name__}:{value!r}"}
    if isinstance(value, (list, tuple)):
        return {"value": f"{type(value).__name__}:{value!r}"[:120]}
    if hasattr(value, "__dict__"):
        fields = sorted(vars(value))
        return {"value": f"{type(value).__name__}:{fields}", "fields": ",".join(fields)}
    return {"value": f"{type(value).__name__}:{value!r}"}


def note(op: str, signature: inspect.Signature, args: tuple, kwargs: dict) -> None:
    bound = signature.bind(None, *args, **kwargs)
    for name, parameter in list(signature.parameters.items())[1:]:
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            for key, value in bound.arguments.get(name, {}).items():
                for aspect, seen in describe(value).items():
                    RECORD[op][key][aspect].add(seen)
            RECORD[op].setdefault("**" + name, defaultdict(set))["value"].add(
                ",".join(sorted(bound.arguments.get(name, {})))
            )
        elif name in bound.arguments:
            for aspect, seen in describe(bound.arguments[name]).items():
                RECORD[op][name][aspect].add(seen)
        else:
            RECORD[op][name]["value"].add(OMITTED)
    arguments = dict(bound.arguments)  # a **config op's keys as its arguments
    for name, parameter in signature.parameters.items():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(arguments.pop(name, {}))
    for measure in MEASURES.get(op, {}).values():
        MEASURED[op][measure.name].update(measure.values(arguments))
    scale, q = bound.arguments.get("scale"), bound.arguments.get("q")
    if isinstance(scale, float) and isinstance(q, torch.Tensor) and q.dim() > 0 and q.shape[-1] > 0:
        RECORD[op]["scale"]["conventional"].add(str(math.isclose(scale, q.shape[-1] ** -0.5, rel_tol=1e-9)))


def _recording(op: str, method):
    signature = inspect.signature(getattr(FAMILIES[OPS[op]], op))

    @functools.wraps(method)
    def call(*args, **kwargs):
        note(op, signature, args, kwargs)
        result = method(*args, **kwargs)
        if op == "dpm_scheduler":  # the schedule's length is set_timesteps' (DPM-ORDER's threshold)
            result.set_timesteps = _measured_set_timesteps(result.set_timesteps, kwargs)
        return result

    return call


def _measured_set_timesteps(set_timesteps, config: dict):
    """``set_timesteps`` measuring its calls as the op ``dpm_scheduler.set_timesteps`` (arguments
    ``num_inference_steps`` and the scheduler's ``config``)."""

    @functools.wraps(set_timesteps)
    def call(num_inference_steps, *args, **kwargs):
        arguments = {"num_inference_steps": num_inference_steps, "config": config}
        for measure in MEASURES.get("dpm_scheduler.set_timesteps", {}).values():
            MEASURED["dpm_scheduler.set_timesteps"][measure.name].update(measure.values(arguments))
        return set_timesteps(num_inference_steps, *args, **kwargs)

    return call


class RecordingBackend:
    name = "recording"

    def __init__(self):
        by_name = {b.name: b for b in backends.builtin_backends()}
        self.sources = {}
        for op in OPS:
            for name in SOURCES:
                if backends.not_implemented_reason(by_name[name], op) is None:
                    self.sources[op] = name
                    setattr(self, op, _recording(op, getattr(by_name[name], op)))
                    break

    def unavailable(self, device):
        return None if device.type == "cpu" else "records on cpu only"


def dump() -> None:
    path = os.environ.get("OPCONFORM_RECORD")
    for args in RECORD.values():  # a **config key some call left out was omitted there
        for spread in [k for k in args if k.startswith("**")]:
            calls = [set(keys.split(",")) - {""} for keys in args.pop(spread)["value"]]
            for key in set().union(*calls):
                if any(key not in keys for keys in calls):
                    args[key]["value"].add(OMITTED)
    if path:
        plain = {op: {arg: {a: sorted(s) for a, s in aspects.items()} for arg, aspects in args.items()}
                 for op, args in RECORD.items()}  # fmt: skip
        plain[RANGES_KEY] = {op: {name: sorted(values, key=repr) for name, values in measured.items()}
                             for op, measured in MEASURED.items()}  # fmt: skip
        with open(path, "w") as file:
            json.dump(plain, file, indent=1, sort_keys=True)


atexit.register(dump)
BACKEND = RecordingBackend()
