"""A pytest plugin (``-p few_examples``) registering ``opconform-few``: the ci profile's derandomized
examples, 5 of them (the ci profile's floor for share_of_examples), unshrunk. For self-tests that run
the whole suite on a backend only to read its verdicts, where the default suite already runs the ci
profile's full draws on it."""

from __future__ import annotations

from hypothesis import settings

from conformance import profiles

settings.register_profile(
    f"{profiles.PREFIX}few", parent=settings.get_profile(f"{profiles.PREFIX}ci-noshrink"), max_examples=5
)
