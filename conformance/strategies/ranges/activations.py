"""The activations family's range rules."""

RULES = []
