"""The dashboard self-tests' product "acme" (loaded with --backend-module, like a user's backend):
a release that conforms, and the next release that regresses (a mutant's Gemma weight bug, a MUST
failure, and a mutant's unchecked weight length, SHOULD failures)."""

from __future__ import annotations

from backends.native import NativeBackend
from mutants.norms import GemmaWeightNotPlusOne, WeightLengthUnchecked


class Acme(NativeBackend):
    name = "acme"


class AcmeRegressed(GemmaWeightNotPlusOne, WeightLengthUnchecked):
    """gemma_rms_norm from GemmaWeightNotPlusOne, rms_norm from WeightLengthUnchecked."""

    name = "acme"


FIXED = Acme()
REGRESSED = AcmeRegressed()
