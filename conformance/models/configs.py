"""Config objects for a profile (MODEL-PROFILE): a built-in's config class built from its fields,
or a local config.json read with transformers' own class for its ``model_type`` (no network).

Errors are one ``ModelError`` line naming the profile, the file or the field.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from conformance.models import builtin, families
from conformance.models.profile import Derived, jsonable, scheduler_uses


class ModelError(ValueError):
    """An unknown profile name, or a config file that cannot give a profile."""


def config_class(dotted: str):
    """``transformers.Gemma2Config`` -> the class; ModelError when the package or class is absent."""
    package, _, name = dotted.partition(".")
    try:
        cls = getattr(importlib.import_module(package), name, None)
    except ImportError as exc:
        raise ModelError(f"{dotted}: {package} is not installed ({exc})") from None
    if cls is None:
        raise ModelError(f"{dotted}: this {package} has no {name}")
    return cls


def build(profile) -> object:
    """The config object of a built-in profile: its class with the profile's fields."""
    return config_class(profile.config_class)(**profile.config)


def builtin_configs() -> list[tuple[str, object]]:
    """(name, config) of every built-in profile with a config of its own (SANA's is Gemma2-2B's), each
    built afresh (a backend may write to the object it is given): MODEL-CONFIG-OPS' generic run."""
    own = [
        p
        for p in builtin.BUILTIN.values()
        if p is builtin.GEMMA2_2B or p.config is not builtin.GEMMA2_2B.config
    ]
    return [(p.name, build(p)) for p in own]


def scheduler_config(fields: dict) -> dict:
    """MODEL-SANA: the DPM-Solver++ scheduler's full configuration (diffusers' class defaults filled)."""
    cls = config_class("diffusers.DPMSolverMultistepScheduler")
    return dict(cls(**fields).config)


def from_profile(profile) -> Derived:
    derived = families.derive(build(profile), name=profile.name, title=profile.title, pipeline=profile.ops)
    if profile.name == "sana":
        scheduler_uses(derived, scheduler_config(builtin.SANA_SCHEDULER))
    return derived


def by_name(name: str) -> Derived:
    """The derived profile of the built-in ``name``."""
    profile = builtin.BUILTIN.get(name)
    if profile is None:
        raise ModelError(f"unknown model {name!r}; built-in models: {sorted(builtin.BUILTIN)}")
    return from_profile(profile)


def from_file(path: str | Path) -> Derived:
    """The derived profile of a local config.json, read with transformers' class for its
    ``model_type`` (``AutoConfig``'s table); named after the model_type."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{path}: not a JSON config: {exc}") from None
    model_type = data.get("model_type") if isinstance(data, dict) else None
    if not isinstance(model_type, str):
        raise ModelError(f"{path}: config has no 'model_type' string")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        raise ModelError(f"{path}: model_type {model_type!r} is not a transformers config class")
    try:
        config = CONFIG_MAPPING[model_type].from_json_file(str(path))
        return families.derive(config, name=model_type)
    except Exception as exc:  # noqa: BLE001 - transformers' validators have their own types; 0 heads divides by 0
        said = " ".join(str(exc).split())  # a validator's message spans lines
        raise ModelError(f"{path}: cannot derive a profile from it: {type(exc).__name__}: {said}") from None


def comparable(derived: Derived) -> dict:
    """What two derivations must share to be the same profile (uses, pins but the config object
    itself, unused clauses and ops; JSON-shaped)."""
    pins = {key: values for key, values in derived.pins.items() if key != families.CONFIG_PIN}
    return jsonable({"uses": [u.as_dict() for u in derived.uses], "pins": pins,
                     "unused": derived.unused_clauses, "unused_ops": derived.unused_ops})  # fmt: skip
