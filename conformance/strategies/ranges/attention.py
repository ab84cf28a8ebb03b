"""The attention family's range rules."""

RULES = []
