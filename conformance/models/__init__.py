"""Model profiles (spec/models.md): a named model's ops with their fixed parameters per layer kind,
the built-in profiles and the reader of a local config.json."""
