"""Serving mutants of the Ascend adapter's paged kernels (spec/serving.md; spec/ascend.md, CANN-FIA-V2,
CANN-PAGED-ATTENTION), each changing one step of backends/npu_serving.py; listed by mutants/serving.py
(``BACKENDS`` here too, so this module alone runs through ``--backend-module``)."""

from __future__ import annotations

import torch

from backends.npu import AscendBackend, emulator_unavailable, load_emulator
from mutants import named

PROPERTIES = ["conformance.test_serving", "conformance.test_serving_inputs"]


class _Npu(AscendBackend):
    def __init__(self, name: str):
        super().__init__(name, load_emulator, emulator_unavailable)


class FiaV2ScaleLeftAtDefault(_Npu):
    """FIA v2 called without ``softmax_scale``: v2's default 1.0 applies, not the model's scale (the
    v1 op's ``scale`` keyword renamed, and the port forgot the new name).

    Origin: the v1 -> v2 keyword renames (spec/ascend.md, CANN-FIA-V2); v1's ``scale=1.0`` default
    is the `ScaleLeftAtOpDefault` class of bug (ATTN-SCALE).
    Caught by: SERVE, ATTN-SCALE, SERVE-SINKS.
    """

    clauses = {"SERVE", "ATTN-SCALE", "SERVE-SINKS"}

    def fia_v2_args(self, *args, **kwargs):
        options = super().fia_v2_args(*args, **kwargs)
        del options["softmax_scale"]
        return options


class FiaV2SinksDropped(_Npu):
    """The sinks reach nobody: the v2 call is made without ``learnable_sink``, so every head's softmax
    sums to 1 (an attention-sink model served as if it had none).

    Origin: vllm-ascend's decode path through ``_npu_paged_attention``, which has no sink input,
    taken for full-attention layers without checking for sinks (spec/ascend.md, CANN-PAGED-ATTENTION).
    Caught by: SERVE-SINKS.
    """

    clauses = {"SERVE-SINKS"}

    def fia_v2_args(self, *args, **kwargs):
        options = super().fia_v2_args(*args, **kwargs)
        options.pop("learnable_sink", None)
        return options


class FiaV2SinksPerKvHead(_Npu):
    """Sinks broadcast per kv head: the sink of each group's first query head (``sinks[::group]``,
    read as if the tensor held one sink per kv head) repeated over the group.

    Origin: learnable_sink is per QUERY head, shape (Q_N,) (spec/ascend.md, CANN-FIA-V2); an adapter
    that sizes it by num_key_value_heads (the cache's head count) under GQA.
    Caught by: SERVE-SINKS.
    """

    clauses = {"SERVE-SINKS"}

    def learnable_sink(self, sinks, device):
        sinks = super().learnable_sink(sinks, device)
        group = sinks.shape[0] // self._kv_heads
        return sinks[::group].repeat_interleave(group).contiguous()

    def fia_v2_args(self, meta, table, block_size, kv_heads, sinks):
        self._kv_heads = kv_heads
        return super().fia_v2_args(meta, table, block_size, kv_heads, sinks)


class AtbContextLensCumulative(_Npu):
    """``_npu_paged_attention`` given the cumulative query ends (``cu_seqlens_q[1:]``, FIA TND's
    ``actual_seq_qlen``) as ``context_lens``: sequence b reads b + 1 keys instead of its own length.

    Origin: the TND call's cumulative lengths reused for the ATB decode op, whose ``context_lens`` is
    each sequence's own kv length (spec/ascend.md, CANN-PAGED-ATTENTION).
    Caught by: SERVE, SERVE-PAGED, SERVE-RAGGED.
    """

    clauses = {"SERVE", "SERVE-PAGED", "SERVE-RAGGED"}

    def atb_paged_args(self, meta, table):
        args = super().atb_paged_args(meta, table)
        args["context_lens"] = torch.tensor(meta.query_starts[1:], dtype=torch.int32)
        return args


MUTANTS = [
    (FiaV2ScaleLeftAtDefault, "npu-fia-v2-scale-left-at-default"),
    (FiaV2SinksDropped, "npu-fia-v2-sinks-dropped"),
    (FiaV2SinksPerKvHead, "npu-fia-v2-sinks-per-kv-head"),
    (AtbContextLensCumulative, "npu-atb-context-lens-cumulative"),
]
BACKENDS = [named(cls, name) for cls, name in MUTANTS]
