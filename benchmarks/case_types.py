"""The bench's case and target types (``benchmarks/cases.py`` lists the cases themselves)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = ["FAMILIES", "GIB", "SHAPE_SETS", "Case", "RelativeTarget", "Target"]

# family -> (oracle module, oracle attribute for an op when it differs from the op name)
FAMILIES: dict[str, str] = {
    "activations": "reference.activations",
    "masks": "reference.masks",
    "attention": "reference.attention",
    "scheduler": "reference.scheduler",
    "serving": "reference.serving",
    "norms": "reference.norms",
    "rope": "reference.rope",
    "kv_cache": "reference.kv_cache",
}
FAMILIES["moe"] = "reference.moe"
FAMILIES["quant"] = "reference.quant"

SHAPE_SETS = ("full", "quick")

GIB = 1024**3


@dataclass(frozen=True)
class Target:
    """An oracle target (docs/performance.md): what the oracle must meet at the full shape (not --quick)."""

    seconds: float
    peak_bytes: int | None = None


@dataclass(frozen=True)
class RelativeTarget:
    """The oracle at the full shape costs at most ``ratio`` x the median time and the peak memory it
    costs on case ``baseline`` (same device, same run): a cost that must not grow with a size the
    case adds, e.g. the same keys read from a larger pool (docs/performance.md)."""

    baseline: str
    ratio: float


@dataclass(frozen=True)
class Case:
    """One op at one shape. ``params`` holds the shape actually run (full or quick)."""

    id: str
    op: str
    family: str
    source: str
    params: dict
    make_inputs: Callable[[dict, torch.device, torch.dtype], tuple[tuple, dict]]
    make_call: Callable[[Callable, tuple, dict], Callable[[], object]] | None = None
    oracle_attr: str | None = None
    peer: str | None = None
    target: Target | None = None
    relative_target: RelativeTarget | None = None
    shape_set: str = "full"
    quick_params: dict = field(default_factory=dict, repr=False)

    @property
    def oracle_module(self) -> str:
        return FAMILIES[self.family]

    def bind(self, fn: Callable, device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
        """Build the inputs on ``device`` and return the zero-argument timed call."""
        args, kwargs = self.make_inputs(self.params, device, dtype)
        if self.make_call is not None:
            return self.make_call(fn, args, kwargs)
        return lambda: fn(*args, **kwargs)
