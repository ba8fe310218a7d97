"""Web-text curation: raw crawl or JSONL in, curated JSONL.zst shards, stats and a report out.

Rooms, lowest first (a room imports only rooms above it in this list, and never a package face;
tests/test_layers.py's CURATE_ROOMS checks it):
- document.py (Document, CurateError), stage.py (stage bases, Executor, register_stage),
  droplog.py (per-shard drop logs): what every stage family shares
- read/: input files and work shards as Documents (WARC, HTML, JSONL), the read task
- extract/: HTML to text, lists and tables, ftfy clean, language id (streaming stages)
- dedup/: exact and fuzzy (MinHash LSH) dedup, their keys, partitions and compiled kernels
- filters/: heuristics, quality classifier, site template lines, holdout (streaming or global)
- decontaminate.py: 13-gram decontamination against evaluation texts
- run/: the registry of stages, pipeline config, phases, executors, report, `curate why`
- samples/: generated fixtures (a sample crawl, templated sites with truth) for the demo,
  tests and benchmarks

Entry points: run.pipeline.run_pipeline, run.pipeline.load_pipeline_config, run.why.why,
filters.quality.train_quality_model, filters.holdout.held_out_texts, samples.crawl.write_sample_warc.
A new stage: a module in the family's folder with @register_stage, and a line in
run/registry.py's BUILTIN_STAGES (docs/curation.md).
"""
