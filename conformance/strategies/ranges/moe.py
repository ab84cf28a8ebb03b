"""The moe family's range rules."""

RULES = []
