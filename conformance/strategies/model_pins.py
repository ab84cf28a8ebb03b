"""A model profile's pins as the family strategies draw them (spec/models.md, MODEL-RUN, MODEL-FAMILIES).

Each function here is one hook a family strategy calls: unpinned (no ``--opconform-model``, no
backend of its own model) it returns what it was given and draws nothing more, so the generic
examples are unchanged; in a profile run it draws the model's values (``conformance.models.families``
sets them). Pins are read when an example is drawn, never when a strategy is built.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math

import torch
from hypothesis import strategies as st

from conformance.strategies.common import pinned_values
from reference import rope as rope_oracle

# --- rope (MODEL-ROPE): the cache's frequencies, the cos/sin rows, the config --------------------------


@functools.lru_cache(maxsize=16)
def frequency_cache(inv_freq: tuple, size: int, attention_factor: float, dtype: torch.dtype) -> torch.Tensor:
    """The cos/sin rows 0 .. size - 1 of a model's frequencies (as float32, as the generic cache's)."""
    inv = torch.tensor(inv_freq, dtype=torch.float64).float()
    return rope_oracle.rope_cos_sin(torch.arange(size), inv, attention_factor=attention_factor).to(dtype)


def rope_frequencies(draw, recipe):
    """A rope recipe at one of the model's rotary widths takes that width's frequencies and attention
    factor (one of them where layer kinds differ in theta); any other recipe is left as drawn."""
    fitting = [f for f in pinned_values("rope.frequencies") or () if f[0] == recipe.rotary_dim]
    if not fitting:
        return recipe
    _, inv_freq, attention_factor, _ = draw(st.sampled_from(fitting))
    return dataclasses.replace(recipe, inv_freq=inv_freq, attention_factor=attention_factor)


@dataclasses.dataclass(frozen=True)
class ModelRows:
    """ROPE-COS-SIN at a model's rope: its frequencies and attention factor, positions up to its max."""

    rotary_dim: int
    inv_freq: tuple[float, ...] = dataclasses.field(repr=False)
    attention_factor: float
    positions: tuple[int, ...]


@st.composite
def cos_sin_rows(draw, *, max_size: int = 16):
    """None unpinned (drawing nothing); in a profile run one of the model's rotary widths with its
    frequencies, and positions near 0, anywhere, and near its max."""
    kinds = pinned_values("rope.frequencies")
    if not kinds:
        return None
    rotary_dim, inv_freq, attention_factor, longest = draw(st.sampled_from(kinds))
    position = st.one_of(
        st.integers(0, 63), st.integers(0, longest - 1), st.integers(longest - 64, longest - 1)
    )
    positions = draw(st.lists(position, min_size=1, max_size=max_size))
    return ModelRows(rotary_dim, inv_freq, attention_factor, tuple(positions))


def rope_config(draw, rope_types, per_layer, any_model_type: bool):
    """(config, seq_len, layer_type) of the model's own config (a copy: a backend may write to it) at
    one of its rope kinds and a length at its thresholds, where the property's rope types (any, with
    ``any_model_type``) and form (``per_layer``: per layer type or not, None: either) admit it;
    None otherwise (the property keeps its generic draw)."""
    configs = pinned_values("model.config")
    kinds = [k for k in pinned_values("rope.config") or () if any_model_type or k[1] in rope_types]
    kinds = [k for k in kinds if per_layer is None or (k[0] is not None) == per_layer]
    if not configs or not kinds:
        return None
    layer_type, _, seq_lens = draw(st.sampled_from(kinds))
    return copy.deepcopy(configs[0][1]), draw(st.sampled_from(seq_lens)), layer_type


# --- MoE (MODEL-MOE): the expert computation's sizes, the shared slots ---------------------------------


def experts(draw, recipe, model_activation: bool):
    """A fused_moe recipe at the model's expert count, top-k and (scaled) hidden and intermediate
    sizes; with ``model_activation`` (a MUST property whose limit is not its subject: it draws
    unclamped ones) also its activation and limit (one not in the profile's sources stays drawn),
    the router weight on the output."""
    kinds = pinned_values("moe.fused")
    if not kinds:
        return recipe
    count, top_k, hidden, inter, activation, limit = draw(st.sampled_from(kinds))
    recipe = dataclasses.replace(recipe, experts=count, top_k=top_k, hidden=hidden, inter=inter)
    if not model_activation:
        return recipe
    known = not isinstance(limit, str)  # a str: not in the profile's sources (drawn)
    return dataclasses.replace(
        recipe, activation=activation, limit=limit if known else recipe.limit, on_input=False
    )


def expert_sizes(count: int) -> tuple[int, int]:
    """(hidden, intermediate) of the expert MLP a routing property runs fused_moe with: the model's
    scaled sizes for its expert count in a profile run, else 8 and 4."""
    sizes = [(k[2], k[3]) for k in pinned_values("moe.fused") or () if k[0] == count]
    return sizes[0] if sizes else (8, 4)


@st.composite
def shared_routing(draw, routing):
    """MOE-SHARED's routing: ``routing``'s draw, in a profile run at the model's expert count, top-k
    and scaling factor (pin ``moe.shared``)."""
    recipe = draw(routing)
    kinds = pinned_values("moe.shared")
    if not kinds:
        return recipe
    count, top_k, _, rsf = draw(st.sampled_from(kinds))
    return dataclasses.replace(recipe, experts=count, top_k=top_k, routed_scaling_factor=rsf, num_groups=1,
                               topk_group=1)  # fmt: skip


@st.composite
def shared_counts(draw):
    """How many shared experts MOE-SHARED appends: the model's in a profile run, else 1 or 2."""
    kinds = pinned_values("moe.shared")
    return draw(st.sampled_from(sorted({k[2] for k in kinds})) if kinds else st.integers(1, 2))


# --- activations (MODEL-ACT) and the encoder mask (MODEL-SANA) -----------------------------------------


def gated_width(draw, shape: tuple, max_numel: int) -> tuple:
    """A gated input's last dim 2 x one of the model's MLP intermediate sizes, its leading dims cut to
    ``max_numel`` (down to one row); unpinned, ``shape``."""
    widths = pinned_values("activation.width")
    if not widths:
        return shape
    half = draw(st.sampled_from(widths))
    lead = list(shape[:-1])
    while lead and math.prod(lead) * 2 * half > max_numel:
        lead.pop()
    return (*lead, 2 * half)


def encoder_windows(default):
    """The windows of the model's encoder layers (MODEL-SANA) in a profile run, else ``default``."""
    values = pinned_values("mask.window")
    return st.sampled_from(values) if values else default
