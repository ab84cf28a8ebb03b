"""Repository conftest: load the opconform plugin when the package is not installed.

An installed opconform registers ``conformance.plugin`` through the ``pytest11`` entry point;
loading it here as well would register it twice.
"""

from importlib import metadata

if not any(ep.value == "conformance.plugin" for ep in metadata.entry_points(group="pytest11")):
    pytest_plugins = ["conformance.plugin"]
