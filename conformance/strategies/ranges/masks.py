"""The masks family's range rules."""

RULES = []
