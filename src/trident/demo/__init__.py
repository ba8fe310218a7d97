"""The whole flow in one command: `trident run FLOW.yaml` (flow/: curate -> tokenizer -> tokenize ->
train -> eval -> report, each stage skipped when unchanged and resumed when killed) and `trident demo`,
which is the packaged flow file demo.flow.yaml (inputs the flow generates itself: the standard library's
docstrings and a synthetic Common Crawl WARC) run by the same code; report.py writes the report."""
