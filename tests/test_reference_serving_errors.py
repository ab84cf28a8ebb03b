"""SERVE-ERRORS: the serving oracle raises every shared bad-input record (conformance/bad_input)."""

from __future__ import annotations

from operator import attrgetter

import pytest
import torch

from conformance.bad_input.serving import ERRORS, paged_call
from reference import serving


@pytest.mark.parametrize("case", ERRORS, ids=attrgetter("id"))
def test_serving_oracle_raises_the_shared_error_cases(case):
    """SERVE-ERRORS: every record (the ones backends are held to) raises ValueError naming the argument."""
    with pytest.raises(case.exception, match=case.match):
        case.call(serving)


def test_the_records_start_from_a_valid_call():
    """The unbroken call the records start from is accepted, so each record fails for its one change."""
    args, kwargs = paged_call()("cpu")
    assert serving.paged_attention(*args, **kwargs).shape == (3, 2, 16)


def test_zero_length_requests_are_accepted_only_where_promised():
    """PAD-SERVE-EMPTY: vLLM's padded form (cu_seqlens_q repeating T, seq_lens 0) is bad input to the
    oracle and to a backend that does not promise it; native accepts it and gives the real rows the
    unpadded call gives. A request of zero queries and some keys stays bad input for every backend."""
    from backends.native import BACKEND as native

    args, kwargs = paged_call()("cpu")
    table = torch.tensor([[0, 1], [2, 3], [0, 0], [0, 0]])
    padded = dict(kwargs, block_table=table, cu_seqlens_q=torch.tensor([0, 1, 3, 3, 3]),
                  seq_lens=torch.tensor([3, 4, 0, 0]))  # fmt: skip
    with pytest.raises(ValueError, match=r"cu_seqlens_q must be strictly increasing"):
        serving.paged_attention(*args, **padded)
    assert torch.equal(native.paged_attention(*args, **padded), native.paged_attention(*args, **kwargs))
    keys_without_queries = dict(padded, seq_lens=torch.tensor([3, 4, 0, 1]))
    with pytest.raises(ValueError, match=r"cu_seqlens_q must be strictly increasing"):
        native.paged_attention(*args, **keys_without_queries)
    ahead = dict(kwargs, block_table=torch.tensor([[0, 0], [0, 1], [2, 3]]),
                 cu_seqlens_q=torch.tensor([0, 0, 1, 3]), seq_lens=torch.tensor([0, 3, 4]))  # fmt: skip
    assert torch.equal(native.paged_attention(*args, **ahead), native.paged_attention(*args, **kwargs))
