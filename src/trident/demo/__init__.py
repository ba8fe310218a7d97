"""The whole flow in one command: `trident demo` (embedded.py: the flow on a corpus built from the
standard library's docstrings) and `trident run FLOW.yaml` (flow/: the same stages for a user's
inputs, each skipped when unchanged and resumed when killed), writing one kind of report (report.py)."""
