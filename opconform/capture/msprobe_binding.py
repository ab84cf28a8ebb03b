"""Binding an msprobe record's arguments to an API's signature, and the mapped call
(spec/ascend.md, MSPROBE-MAP): the types ``msprobe_map`` and ``msprobe_map_attention`` share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

REQUIRED = object()  # a parameter without a default


class Unmapped(ValueError):
    """This call of a mapped API is outside its contract op's arguments; the message says why."""


@dataclass
class Mapped:
    op: str  # a REPLAY_OPS op
    inputs: dict  # tensor arguments by the row's names
    options: dict
    outputs: list  # the outputs the row judges, in its order


@dataclass(frozen=True)
class Mapping:
    params: tuple[tuple[str, object], ...]  # (name, default or REQUIRED), the API's order
    build: Callable[[dict, list], Mapped]  # (bound arguments, outputs) -> Mapped
    source: str  # where the signature and semantics are documented (spec/ascend.md section)
    # keywords outside ``params`` are kept in bound["rest"] (an API with many optional inputs the
    # contract op has no argument for: the build refuses those that are given) instead of refused
    rest: bool = False


def bind(api: str, mapping: Mapping, args: list, kwargs: dict) -> dict:
    """The call's arguments by parameter name, defaults filled in (and ``rest``: see Mapping);
    Unmapped when they do not bind."""
    names = [name for name, _ in mapping.params]
    if len(args) > len(names):
        raise Unmapped(f"{api}: {len(args)} positional arguments, the signature has {len(names)}")
    bound = dict(zip(names, args, strict=False))
    rest = bound["rest"] = {} if mapping.rest else None
    for key, value in kwargs.items():
        if rest is not None and key not in names:
            rest[key] = value
            continue
        if key not in names or key in bound:
            raise Unmapped(f"{api}: argument {key!r} is not in its signature {names} (or given twice)")
        bound[key] = value
    for name, default in mapping.params:
        if name not in bound:
            if default is REQUIRED:
                raise Unmapped(f"{api}: required argument {name!r} missing")
            bound[name] = default
    return bound


def tensor_arg(bound: dict, name: str, api: str) -> torch.Tensor:
    value = bound[name]
    if not isinstance(value, torch.Tensor):
        raise Unmapped(f"{api}: {name} is {type(value).__name__}, not a tensor")
    return value
