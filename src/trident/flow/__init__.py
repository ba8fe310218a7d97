"""`trident run FLOW.yaml`: raw text to an evaluated model, one resumable stage at a time (curate ->
tokenizer -> tokenize -> train -> eval -> report, each stage skipped when unchanged and resumed when
killed); report.py assembles the run's report, report_page.py writes report.md and the loss plot."""
