"""The scheduler family's range rules."""

RULES = []
