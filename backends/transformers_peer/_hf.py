"""Lazy access to the installed transformers: a module is imported the first time an op needs it
(importing transformers' modeling code costs seconds, paid only when a case of this backend runs)."""

from __future__ import annotations

import functools
import importlib


@functools.cache
def hf_module(name: str):
    """``transformers.<name>``, imported once (e.g. ``hf_module("models.llama.modeling_llama")``)."""
    return importlib.import_module(f"transformers.{name}")


def hf_attr(name: str, attribute: str):
    """``transformers.<name>.<attribute>``."""
    return getattr(hf_module(name), attribute)
