"""A backend module that cannot be imported: its source has a syntax error (compiled at import)."""

exec(compile("def broken(:\n    pass\n", "misbehaving_import_error.py", "exec"))
