"""Activation mutants for the clamped look-alikes, SiTU and the limit's selection (spec/activations.md:
ACT-SILU-CLAMPED, ACT-CLAMP-ORDER, ACT-SWIGLU-OAI, ACT-SITU, ACT-CLAMP-NO-DEFAULT, ACT-LIMIT-CONFIG).

Part of the ``activations`` family: ``mutants/activations.py`` lists them in its ``BACKENDS``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from backends.native import NativeBackend
from reference import activations as ref
from reference.activations import validate_gated_input
from reference.validation import require_positive_finite, require_positive_finite_or_none


class SiluClampedAfterSilu(NativeBackend):
    """silu_clamped_and_mul clamps AFTER the SiLU: silu(gate).clamp(max=limit) * up_c.

    Origin: the SwiGLU-step kernel (Step-3.5) reused for vLLM's SiluAndMulWithClamp contract
    (DeepSeek-V4 shared experts); the two differ only in where the gate is clamped.
    Caught by: ACT-SILU-CLAMPED, ACT-CLAMP-ORDER.
    """

    name = "silu-clamped-after-silu"
    clauses = {"ACT-SILU-CLAMPED", "ACT-CLAMP-ORDER"}

    def silu_clamped_and_mul(self, x, *, limit):
        return NativeBackend.swiglu_step_and_mul(x, limit=limit)


class _OaiMutant(NativeBackend):
    """Validation as in the contract, then ``glu(gate, up, alpha, limit)`` on the chosen layout."""

    def layout(self, x, interleaved):
        return ref.oai_gate_up(x, interleaved)

    def glu(self, gate, up, alpha):
        return gate * torch.sigmoid(alpha * gate) * (up + 1)

    def swiglu_oai_and_mul(self, x, *, alpha, limit, interleaved):
        validate_gated_input(x)
        alpha = require_positive_finite(alpha, "alpha")
        limit = require_positive_finite_or_none(limit, "limit")
        gate, up = self.layout(x.float(), ref.require_bool(interleaved, "interleaved"))
        if limit is not None:
            gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
        return self.glu(gate, up, alpha).to(x.dtype)


class OaiHalvesNotInterleaved(_OaiMutant):
    """The gpt-oss SwiGLU on the halves layout whatever ``interleaved`` says.

    Origin: gpt-oss checkpoints interleave gate and up columns (``gate_up[..., ::2]``); kernels
    written for merged ``[gate | up]`` projections split the halves.
    Caught by: ACT-SWIGLU-OAI, ACT-SWIGLU-OAI-LAYOUT.
    """

    name = "oai-halves-not-interleaved"
    clauses = {"ACT-SWIGLU-OAI", "ACT-SWIGLU-OAI-LAYOUT"}

    def layout(self, x, interleaved):
        return ref.oai_gate_up(x, False)


class OaiWithoutPlusOne(_OaiMutant):
    """The ``+ 1`` on up dropped: glu * up.

    Origin: the gpt-oss formula read as a plain SwiGLU with a sigmoid slope (a port's docstring
    notes that dropping the shift makes the model incoherent).
    Caught by: ACT-SWIGLU-OAI.
    """

    name = "oai-without-plus-one"
    clauses = {"ACT-SWIGLU-OAI"}

    def glu(self, gate, up, alpha):
        return gate * torch.sigmoid(alpha * gate) * up


class OaiAlphaOne(_OaiMutant):
    """alpha ignored: sigmoid(gate) instead of sigmoid(1.702 gate), i.e. SiLU.

    Origin: the gpt-oss activation mapped onto a SiLU kernel with the clamp and the ``+ 1``.
    Caught by: ACT-SWIGLU-OAI.
    """

    name = "oai-alpha-one"
    clauses = {"ACT-SWIGLU-OAI"}

    def glu(self, gate, up, alpha):
        return F.silu(gate) * (up + 1)


class ClampedDefaultLimitSeven(NativeBackend):
    """The new clamped ops default ``limit`` to 7.0, and treat None as 7.0.

    Origin: vLLM's ``SwigluOAIAndMul(alpha=1.702, limit=7.0)`` and ``SwigluStepAndMul(limit=7.0)``
    defaults, and the NPU helper's silent 7.0 (ACT-SWIGLU-STEP-NO-LIMIT).
    Caught by: ACT-CLAMP-NO-DEFAULT.
    """

    name = "clamped-default-limit-seven"
    clauses = {"ACT-CLAMP-NO-DEFAULT"}

    def silu_clamped_and_mul(self, x, *, limit=7.0):
        return NativeBackend.silu_clamped_and_mul(x, limit=7.0 if limit is None else limit)

    def swiglu_oai_and_mul(self, x, *, alpha, limit=7.0, interleaved):
        limit = 7.0 if limit is None else limit
        return NativeBackend.swiglu_oai_and_mul(x, alpha=alpha, limit=limit, interleaved=interleaved)


def _limit_list(config, shared: bool):
    """The config's limit list: a config.json mapping's key or a config object's attribute."""
    key = ref.LIMIT_KEYS[shared]
    return config.get(key) if isinstance(config, dict) else getattr(config, key, None)


class _LimitMutant(NativeBackend):
    """Config reading as in the contract; ``select(value, shared)`` decides on the list entry."""

    def select(self, value, shared):
        raise NotImplementedError

    def swiglu_limit(self, config, layer_idx, *, shared):
        ref.swiglu_limit(config, layer_idx, shared=shared)  # the contract's validation
        limits = _limit_list(config, shared)
        value = limits[layer_idx] if limits is not None and layer_idx < len(limits) else None
        return self.select(value, shared)


class LimitNegativeTruthy(_LimitMutant):
    """A negative limit treated as a limit: ``if value:`` instead of ``value > 0``.

    Origin: truthiness checks on the per-layer lists (``if swiglu_limit:``), which let any
    non-zero value through: transformers' Step3p7 layers (``or None``, ``or float("inf")``) and
    vLLM's shared expert do so (spec/activations.md, Sources).
    Caught by: ACT-LIMIT-CONFIG-ROBUST (SHOULD: no released config holds a negative limit).
    """

    name = "limit-negative-truthy"
    clauses = {"ACT-LIMIT-CONFIG-ROBUST"}
    # Reclassified: a robustness mistake only a SHOULD clause sees (spec/README.md, Levels).
    level = "SHOULD"
    why = "transformers' and vLLM's Step-3.5 readers test truthiness too; released limits are 0, 7 or 16"

    def select(self, value, shared):
        return float(value) if value else None


class LimitAlwaysSeven(_LimitMutant):
    """The configured limit ignored: 7.0 on every layer that has one.

    Origin: a clamp hard-coded at gpt-oss's 7.0 and enabled per layer by the config.
    Caught by: ACT-LIMIT-CONFIG, ACT-LIMIT-CONFIG-LAYER.
    """

    name = "limit-always-seven"
    clauses = {"ACT-LIMIT-CONFIG", "ACT-LIMIT-CONFIG-LAYER"}

    def select(self, value, shared):
        return 7.0 if value is not None and value > 0 else None


class SharedLimitNotZero(_LimitMutant):
    """``!= 0`` for the shared expert and ``> 0`` for the routed ones.

    Origin: sglang's Step-3.5 decoder layer enables the shared clamp with ``!= 0`` while its routed
    experts test ``> 0`` (spec/activations.md, Sources).
    Caught by: ACT-LIMIT-CONFIG-ROBUST (SHOULD: no released config holds a negative limit).
    """

    name = "shared-limit-not-zero"
    clauses = {"ACT-LIMIT-CONFIG-ROBUST"}
    # Reclassified: a robustness mistake only a SHOULD clause sees (spec/README.md, Levels).
    level = "SHOULD"
    why = "sglang 0.5.23's own shared-expert test; the two differ on negative limits only"

    def select(self, value, shared):
        enabled = value is not None and (value != 0 if shared else value > 0)
        return float(value) if enabled else None


class LimitPastListReadsLast(NativeBackend):
    """Past a short list, the last entry is the limit: ``limits[min(layer_idx, len(limits) - 1)]``.

    Origin: a reader that clamps the index to the list so that the MTP layers (indexed from
    num_hidden_layers on) find an entry in lists that stop at the main layers (spec/activations.md,
    ACT-LIMIT-CONFIG-OFF).
    Caught by: ACT-LIMIT-CONFIG-OFF.
    """

    name = "limit-past-list-reads-last"
    clauses = {"ACT-LIMIT-CONFIG-OFF"}

    def swiglu_limit(self, config, layer_idx, *, shared):
        ref.swiglu_limit(config, layer_idx, shared=shared)  # the contract's validation
        limits = _limit_list(config, shared)
        if not limits:
            return None
        value = limits[min(layer_idx, len(limits) - 1)]
        return float(value) if value is not None and value > 0 else None


BACKENDS = [
    SiluClampedAfterSilu(),
    OaiHalvesNotInterleaved(),
    OaiWithoutPlusOne(),
    OaiAlphaOne(),
    ClampedDefaultLimitSeven(),
    LimitNegativeTruthy(),
    LimitAlwaysSeven(),
    SharedLimitNotZero(),
    LimitPastListReadsLast(),
]


class QuickGeluAsTanhGelu(NativeBackend):
    """quick_gelu computed as the tanh GELU (NewGELU).

    Origin: activation tables keyed by name, where "quick_gelu", "gelu_new" and "gelu_fast" are
    neighbours and read as one "approximate GELU" (CLIP-style models use quick_gelu).
    Caught by: ACT-GELU-VARIANTS.
    """

    name = "quick-gelu-as-tanh-gelu"
    clauses = {"ACT-GELU-VARIANTS"}

    def quick_gelu(self, x):
        return NativeBackend.new_gelu(x)


BACKENDS.append(QuickGeluAsTanhGelu())


class _SituMutant(NativeBackend):
    """Validation as in the contract, float32 inside; ``situ(gate, up, beta, linear_beta)`` decides."""

    def situ(self, gate, up, beta, linear_beta):
        if linear_beta is not None:
            up = linear_beta * torch.tanh(up / linear_beta)
        return beta * torch.tanh(gate / beta) * torch.sigmoid(gate) * up

    def situ_and_mul(self, x, *, beta, linear_beta):
        d = validate_gated_input(x)
        beta = require_positive_finite(beta, "beta")
        linear_beta = require_positive_finite_or_none(linear_beta, "linear_beta")
        v = x if x.dtype == torch.float64 else x.float()
        return self.situ(v[..., :d], v[..., d:], beta, linear_beta).to(x.dtype)


class SituClipOnSiluOutput(_SituMutant):
    """The soft-clip applied to SiLU's output: beta tanh(silu(gate) / beta) instead of
    beta tanh(gate / beta) sigmoid(gate).

    Origin: SiTU read as "a soft-capped SiLU" and built from an existing SiLU kernel's output,
    the way logit soft-capping wraps a finished value.
    Caught by: ACT-SITU.
    """

    name = "situ-clip-on-silu-output"
    clauses = {"ACT-SITU"}

    def situ(self, gate, up, beta, linear_beta):
        if linear_beta is not None:
            up = linear_beta * torch.tanh(up / linear_beta)
        return beta * torch.tanh(F.silu(gate) / beta) * up


class SituLinearBetaIgnored(_SituMutant):
    """linear_beta accepted but not applied: the up half is not soft-clipped.

    Origin: a SiTU kernel written for the gate activation alone (the SwiGLU kernels' shape,
    where up passes through), with linear_beta plumbed but unused.
    Caught by: ACT-SITU, ACT-SITU-BOUND.
    """

    name = "situ-linear-beta-ignored"
    clauses = {"ACT-SITU", "ACT-SITU-BOUND"}

    def situ(self, gate, up, beta, linear_beta):
        return super().situ(gate, up, beta, None)


class SituDefaultBetas(_SituMutant):
    """beta and linear_beta default to Kimi-K3's 4.0 and 25.0 when the caller omits them.

    Origin: upstream SiTU references declare ``beta=4.0, linear_beta=25.0`` as keyword defaults,
    so a model whose config sets other values silently runs with Kimi-K3's.
    Caught by: ACT-CLAMP-NO-DEFAULT.
    """

    name = "situ-default-betas"
    clauses = {"ACT-CLAMP-NO-DEFAULT"}

    def situ_and_mul(self, x, *, beta=4.0, linear_beta=25.0):
        return super().situ_and_mul(x, beta=beta, linear_beta=linear_beta)


BACKENDS += [SituClipOnSiluOutput(), SituLinearBetaIgnored(), SituDefaultBetas()]
