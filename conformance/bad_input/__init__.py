"""Bad inputs as records (OpInfo style), one module per family: ``conformance.bad_input.<family>``
holds that family's records as ``ERRORS``. They are shared by the oracles' self-tests
(tests/test_reference_*.py) and the SHOULD properties ``test_should_reject_bad_input``
(conformance/test_*.py): the field's production layers do not validate their inputs
(spec/README.md, Levels), so rejecting bad input is a SHOULD in every family.

A record names the clause (ACT-ERRORS, NORM-ERRORS, ...), the op, how to build the call's
arguments on a device, the exception type the clause demands, and ``match``: a regex on the
argument's name, which each of these clauses says the message names. The oracle must raise
``exception`` with a message matching ``match``; so must every backend that validates.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from conformance import signatures
from conformance.checks import check_raises, describe

Arguments = tuple[tuple, dict]


@dataclass(frozen=True)
class ErrorCase:
    """``op(*args, **kwargs)`` with ``build(device) -> (args, kwargs)`` raises ``exception`` whose
    message matches ``match`` (clause ``clause``)."""

    clause: str
    op: str
    name: str
    build: Callable[[torch.device | str], Arguments]
    exception: type[Exception]
    match: str

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}"

    def bad_input(self, device: torch.device | str = "cpu") -> str:
        """The bad argument(s) as ``name=value`` (those whose name ``match`` names; all of them when
        none does), e.g. ``approximate='erf'``: what a failure message shows, not the record's id."""
        from conformance.signatures import protocol_signature

        args, kwargs = self.build(device)
        names = [p.name for p in protocol_signature(self.op)[1].parameters.values()]
        given = {**dict(zip(names, args, strict=False)), **kwargs}
        bad = {k: v for k, v in given.items() if re.search(self.match, k)} or given
        return ", ".join(f"{k}={_shown(v)}" for k, v in bad.items())

    def call(self, impl, device: torch.device | str = "cpu"):
        """Call ``impl.op`` (an oracle module or a backend) on this bad input built on ``device``."""
        args, kwargs = self.build(device)
        return getattr(impl, self.op)(*args, **kwargs)


def _shown(value) -> str:
    """A value as a message shows it: small integer tensors by their values, others by shape/dtype."""
    if not isinstance(value, torch.Tensor):
        return f"{value!r:.80}"
    if not value.is_floating_point() and not value.is_complex() and value.numel() <= 16:
        return f"tensor({value.tolist()}, dtype={value.dtype})"
    return f"tensor(shape={tuple(value.shape)}, dtype={value.dtype})"


def names(*arguments: str) -> str:
    """A regex matching any of ``arguments`` as a whole name (``x`` in ``x.shape[-1]``, not in ``max``)."""
    return "|".join(rf"(?<![\w.]){re.escape(a)}(?!\w)" for a in arguments)


def params(cases: list[ErrorCase]) -> list:
    """pytest params, one per record: id ``op-name``, marked with the op (for the not-implemented skip)."""
    return [pytest.param(case, marks=pytest.mark.op(case.op), id=case.id) for case in cases]


def check_backend_raises(case: ErrorCase, backend, device) -> None:
    """The backend raises the record's exception type with a message matching the record's regex.

    A record that passes an optional capability's keywords (``signatures.OPTIONAL_KEYWORDS``: the fp8
    scales of paged_attention) to an op that does not take them is not implemented there, never failed
    (spec/kv_cache.md, KV-FP8-READ): the backend has no such input to reject."""
    args, kwargs = case.build(device)
    missing = [name for name in signatures.missing_keywords(backend, case.op) if name in kwargs]
    if missing:
        name = getattr(backend, "name", type(backend).__name__)
        pytest.skip(f"not implemented: backend {name!r}'s {case.op} takes no {', '.join(missing)} (fp8)")
    check_raises(
        case.exception,
        lambda: getattr(backend, case.op)(*args, **kwargs),
        clause=case.clause,
        match=case.match,
        context=f"{describe(backend, device, case.op)}: bad input {case.bad_input(device)}",
    )
