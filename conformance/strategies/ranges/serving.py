"""The serving family's range rules."""

RULES = []
