"""The Ascend adapter's MoE mutants (spec/moe.md; spec/ascend.md, CANN-MOE-GATING-TOPK,
CANN-MOE-GATING-TOPK-SOFTMAX), collected into mutants/moe.py's batch."""

from __future__ import annotations

import torch

from backends.npu import AscendBackend, emulator_unavailable, load_emulator


class _Npu(AscendBackend):
    def __init__(self):
        super().__init__(self.name, load_emulator, emulator_unavailable)


class NpuNormTypeNotPassed(_Npu):
    """norm_type left to npu_moe_gating_top_k's default, 1 (sigmoid), also for softmax models.

    Origin: sglang#29042, #29493 (the NPU top-k's norm type never set from scoring_func).
    Caught by: MOE-SELECT, MOE-RENORM, MOE-RSF-ONCE.
    """

    name = "moe-npu-norm-type-not-passed"
    clauses = {"MOE-SELECT", "MOE-RENORM", "MOE-RSF-ONCE"}

    def npu_gating_args(self, **options):
        args = super().npu_gating_args(**options)
        del args["norm_type"]
        return args


class NpuRsfNotPassed(_Npu):
    """routed_scaling_factor not passed to npu_moe_gating_top_k (its default 1.0 applies).

    Origin: sglang#29909 (fused_topk_npu dropped the factor 2.826 after renormalisation).
    Caught by: MOE-SELECT, MOE-RENORM, MOE-RSF-ONCE.
    """

    name = "moe-npu-rsf-not-passed"
    clauses = {"MOE-SELECT", "MOE-RENORM", "MOE-RSF-ONCE"}

    def npu_gating_args(self, **options):
        args = super().npu_gating_args(**options)
        del args["routed_scaling_factor"]
        return args


class NpuRsfInKernelAndAfter(_Npu):
    """The factor passed to the kernel, which applies it, and multiplied again by the framework.

    Origin: vllm#24119's double scaling on the Ascend path (rsf inside aclnnMoeGatingTopK).
    Caught by: MOE-SELECT, MOE-RENORM, MOE-RSF-ONCE.
    """

    name = "moe-npu-rsf-in-kernel-and-after"
    clauses = {"MOE-SELECT", "MOE-RENORM", "MOE-RSF-ONCE"}

    def select_experts(self, router_logits, *, routed_scaling_factor, **options):
        weights, ids = super().select_experts(
            router_logits, routed_scaling_factor=routed_scaling_factor, **options
        )
        uses_kernel = options["num_groups"] > 1 or options["correction_bias"] is not None
        uses_kernel = uses_kernel or options["scoring"] == "sigmoid"
        return (weights * routed_scaling_factor if uses_kernel else weights), ids


class NpuBiasInLogitsDtype(_Npu):
    """The kernel's equal-dtype rule met by casting the float32 bias down to the logits' dtype.

    Origin: sglang#37133's bug class, forced by npu_moe_gating_top_k's bias-dtype rule.
    Caught by: MOE-BIAS.
    """

    name = "moe-npu-bias-in-logits-dtype"
    clauses = {"MOE-BIAS"}

    def select_experts(self, router_logits, *, correction_bias, **options):
        self._logits_dtype = router_logits.dtype
        return super().select_experts(router_logits, correction_bias=correction_bias, **options)

    def gating_bias(self, correction_bias, x):
        if correction_bias is None:
            return None
        return correction_bias.to(self._logits_dtype).to(x.dtype)


class NpuRowIndexTokenMajor(_Npu):
    """The k-major row index of npu_moe_gating_top_k_softmax read as token-major (t * k + j).

    Origin: the combine step after npu_moe_init_routing indexing the expanded rows the other way.
    Caught by: MOE-FUSED, MOE-CLAMP, MOE-PERMUTE, MOE-RSF-ONCE.
    """

    name = "moe-npu-row-index-token-major"
    clauses = {"MOE-FUSED", "MOE-CLAMP", "MOE-PERMUTE", "MOE-RSF-ONCE"}

    def row_index(self, tokens, k, device):
        return torch.arange(tokens * k, device=device).reshape(tokens, k)


NPU_MUTANTS = [
    NpuNormTypeNotPassed(),
    NpuRsfNotPassed(),
    NpuRsfInKernelAndAfter(),
    NpuBiasInLogitsDtype(),
    NpuRowIndexTokenMajor(),
]
