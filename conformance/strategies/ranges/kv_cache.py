"""The kv_cache family's range rules."""

RULES = []
