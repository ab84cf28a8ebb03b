"""The opconform tool: the command line and what it runs around the suite (report, render,
mutation runner, bench). The conformance properties and the pytest plugin live in
``conformance``; this package only drives and reads them.
"""
