"""Emulated torch_npu ops of the W8A8 expert path (spec/ascend.md, CANN-DEQUANT-SWIGLU-QUANT,
CANN-GROUPED-MATMUL-W8A8): ``npu_dequant_swiglu_quant`` and the int8 form of ``npu_grouped_matmul``.

``npu_dequant_swiglu_quant`` keeps its documented rules: x int32 [T, 2H]; weight_scale float32
[groupNum, 2H]; activation_scale float32 per token; group_index int64 token counts (count mode
only), with which only dynamic quantization (quant_mode=1) and H <= 10496, a multiple of 64, are
allowed; ``activate_left`` False by default (the SiLU on the RIGHT half). Rows past the counts' sum
are garbage on the device: here y 0 and scale NaN, so an adapter that reads them fails loudly.
``npu_grouped_matmul`` covers the one form vllm-ascend's W8A8-dynamic experts call: one int8 x
[rows, K] sorted by group, one int8 weight [E, K, N], group_type 0, group_list counts
(group_list_type 1) or a cumulative sum (0); int32 output without scales, or float16 / bfloat16 with
``scale=[E, N]`` and ``per_token_scale=[rows]``. Other forms raise NotImplementedError.
"""

from __future__ import annotations

import torch

__all__ = ["npu_dequant_swiglu_quant", "npu_grouped_matmul"]


def _group_rows(counts: torch.Tensor, rows: int) -> torch.Tensor:
    """The group of each of ``rows`` rows under count-mode ``counts``; -1 past their sum."""
    owner = torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts.long())
    return torch.cat([owner, owner.new_full((rows - owner.numel(),), -1)])


def npu_dequant_swiglu_quant(
    x, *, weight_scale=None, activation_scale=None, bias=None, quant_scale=None, quant_offset=None,
    group_index=None, activate_left=False, quant_mode=0,
):  # fmt: skip
    """(y int8 [T, H], scale float32 [T]): x * weight_scale[group] * activation_scale[t], SwiGLU
    (swish of the left half times the right with activate_left, else swish(right) * left), then
    per-row dynamic int8: scale = row_max(|v|) / 127, y = round(v / scale)."""
    if x.dtype != torch.int32 or x.dim() != 2 or x.shape[1] % 2:
        raise ValueError(f"x must be a 2-D int32 tensor [T, 2H], got {x.dtype} {tuple(x.shape)}")
    if weight_scale is None or activation_scale is None:
        raise ValueError("an int32 x needs weight_scale and activation_scale (the dequantization)")
    if bias is not None or quant_scale is not None or quant_offset is not None or quant_mode != 1:
        raise NotImplementedError(
            "the emulator covers dynamic quantization (quant_mode=1) without bias or smooth"
        )
    tokens, two_h = x.shape
    if weight_scale.dtype != torch.float32 or activation_scale.dtype != torch.float32:
        raise TypeError("weight_scale and activation_scale must be float32")
    if activation_scale.numel() != tokens:
        raise ValueError(
            f"activation_scale must have {tokens} values (one a token), got {activation_scale.numel()}"
        )
    if group_index is None:
        rows = torch.zeros(tokens, dtype=torch.long, device=x.device)
        groups = 1
    else:
        if group_index.dtype != torch.int64 or group_index.dim() != 1:
            raise ValueError(
                f"group_index must be 1-D int64 counts, got {group_index.dtype} {tuple(group_index.shape)}"
            )
        if two_h // 2 > 10496 or (two_h // 2) % 64:
            raise ValueError(f"with group_index H must be a multiple of 64 up to 10496, got {two_h // 2}")
        rows, groups = _group_rows(group_index, tokens), group_index.numel()
    if tuple(weight_scale.reshape(-1, two_h).shape) != (groups, two_h):
        raise ValueError(f"weight_scale must be [{groups}, {two_h}], got {tuple(weight_scale.shape)}")
    valid = rows >= 0
    v = x.float() * weight_scale.reshape(groups, two_h)[rows.clamp_min(0)] * activation_scale.reshape(-1, 1)
    left, right = v.chunk(2, dim=-1)
    act = torch.nn.functional.silu(left) * right if activate_left else torch.nn.functional.silu(right) * left
    scale = act.abs().amax(-1) / 127.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # emulator choice: a zero row -> 0
    y = torch.round(act / safe[:, None]).clamp(-128, 127).to(torch.int8)
    y[~valid] = 0
    return y, torch.where(valid, scale, torch.full_like(scale, float("nan")))


def npu_grouped_matmul(
    x, weight, *, bias=None, scale=None, offset=None, antiquant_scale=None, antiquant_offset=None,
    per_token_scale=None, group_list=None, activation_input=None, activation_quant_scale=None,
    activation_quant_offset=None, split_item=0, group_type=None, group_list_type=0, act_type=0,
    output_dtype=None,
):  # fmt: skip
    """[x[rows of group e] @ weight[e]] as one tensor in a list: int32 sums, or dequantized by
    scale[e, n] * per_token_scale[row] into output_dtype."""
    unsupported = (bias, offset, antiquant_scale, antiquant_offset, activation_input, activation_quant_scale,
                   activation_quant_offset)  # fmt: skip
    if (
        len(x) != 1
        or len(weight) != 1
        or any(v is not None for v in unsupported)
        or group_type != 0
        or act_type
    ):
        raise NotImplementedError("the emulator covers one int8 x, one [E, K, N] weight, group_type 0")
    (a,), (w,) = x, weight
    if (
        a.dtype != torch.int8
        or w.dtype != torch.int8
        or a.dim() != 2
        or w.dim() != 3
        or a.shape[1] != w.shape[1]
    ):
        raise ValueError(
            f"x [rows, K] and weight [E, K, N] int8 expected, got {tuple(a.shape)}, {tuple(w.shape)}"
        )
    if split_item not in (2, 3) or group_list is None or group_list_type not in (0, 1):
        raise NotImplementedError("the emulator covers split_item 2 / 3 with a group_list (type 0 or 1)")
    counts = group_list if group_list_type == 1 else torch.diff(group_list, prepend=group_list.new_zeros(1))
    rows = _group_rows(counts, a.shape[0])
    acc = torch.zeros(a.shape[0], w.shape[2], dtype=torch.float64, device=a.device)
    for e in range(w.shape[0]):
        r = rows == e
        acc[r] = a[r].double() @ w[e].double()  # exact: |sum| < 2^31 < 2^53
    if output_dtype == torch.int32 and scale is None and per_token_scale is None:
        return [acc.to(torch.int32)]
    if output_dtype not in (torch.float16, torch.bfloat16) or scale is None or per_token_scale is None:
        raise NotImplementedError("the emulator covers int32 output, or float16 / bfloat16 with both scales")
    (s,), (p,) = scale, per_token_scale
    out = acc.float() * s.reshape(w.shape[0], -1)[rows.clamp_min(0)] * p.reshape(-1, 1)
    return [out.to(output_dtype)]
