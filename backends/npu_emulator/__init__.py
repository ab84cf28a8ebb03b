"""A pure-PyTorch stand-in for the ``torch_npu`` ops the Ascend adapter calls.

It follows the *documented* semantics and defaults of each op (not what the adapter
needs), including its input restrictions, so that adapter code which leans on a default or
breaks a restriction fails here on CPU the way it would on an NPU. One module per op
family; this package re-exports their ops under the ``torch_npu`` names.
"""

from backends.npu_emulator.activations import npu_fast_gelu, npu_geglu, npu_gelu, npu_swiglu
from backends.npu_emulator.atb_paged_attention import _npu_paged_attention
from backends.npu_emulator.attention import npu_fused_infer_attention_score
from backends.npu_emulator.attention_v2 import npu_fused_infer_attention_score_v2
from backends.npu_emulator.kv_cache import (
    _npu_reshape_and_cache,
    npu_scatter_nd_update_,
    npu_scatter_pa_kv_cache,
)
from backends.npu_emulator.moe import npu_moe_gating_top_k, npu_moe_gating_top_k_softmax
from backends.npu_emulator.norms import npu_add_rms_norm, npu_rms_norm
from backends.npu_emulator.quant import npu_dynamic_quant, npu_quant_matmul
from backends.npu_emulator.quant_moe import npu_dequant_swiglu_quant, npu_grouped_matmul
from backends.npu_emulator.rope import npu_apply_rotary_pos_emb, npu_mrope, npu_rotary_mul
from backends.npu_emulator.weight_quant import npu_convert_weight_to_int4pack, npu_weight_quant_batchmatmul

__all__ = ["npu_geglu", "npu_swiglu", "npu_gelu", "npu_fast_gelu", "npu_fused_infer_attention_score"]
__all__ += ["npu_moe_gating_top_k", "npu_moe_gating_top_k_softmax"]
__all__ += ["npu_rotary_mul", "npu_mrope", "npu_apply_rotary_pos_emb"]
__all__ += ["npu_scatter_pa_kv_cache", "npu_scatter_nd_update_", "_npu_reshape_and_cache"]
__all__ += ["npu_rms_norm", "npu_add_rms_norm"]
__all__ += ["npu_fused_infer_attention_score_v2", "_npu_paged_attention"]
__all__ += ["npu_dynamic_quant", "npu_quant_matmul", "npu_dequant_swiglu_quant", "npu_grouped_matmul"]
__all__ += ["npu_weight_quant_batchmatmul", "npu_convert_weight_to_int4pack"]
