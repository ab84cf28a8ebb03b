"""The norms family's range rules."""

RULES = []
