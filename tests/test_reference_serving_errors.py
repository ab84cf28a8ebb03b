"""SERVE-ERRORS: the serving oracle raises every shared bad-input record (conformance/bad_input)."""

from __future__ import annotations

from operator import attrgetter

import pytest

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
