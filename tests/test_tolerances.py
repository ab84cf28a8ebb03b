"""The tolerance table in spec/tolerances.md (TOL-TABLE) is the one the code uses."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from conformance.tolerances import SCALING_RULES, TOLERANCES, Tolerance

SPEC = Path(__file__).resolve().parent.parent / "spec" / "tolerances.md"
ROW = re.compile(r"^\|\s*([a-z-]+)\s*\|\s*(float\d+|bfloat16)\s*\|\s*([0-9.e-]+)\s*\|\s*([0-9.e-]+)\s*\|")


def spec_table() -> dict:
    table: dict = {}
    for line in SPEC.read_text().splitlines():
        match = ROW.match(line)
        if match:
            family, dtype, rtol, atol = match.groups()
            table.setdefault(family, {})[getattr(torch, dtype)] = Tolerance(float(rtol), float(atol))
    return table


def test_spec_table_equals_code_table():
    """Every family/dtype entry is documented in the spec with the same rtol and atol, and vice versa."""
    assert spec_table() == TOLERANCES


def test_every_scaling_rule_is_documented_in_the_spec():
    """Each scaling rule of conformance/tolerances.py is a row of the spec's scaling-rule table."""
    first_cells = [line.split("|")[1] for line in SPEC.read_text().splitlines() if line.startswith("| `")]
    rules = {name for cell in first_cells for name in re.findall(r"`(\w+)`", cell)}
    assert {rule.__name__ for rule in SCALING_RULES} <= rules
