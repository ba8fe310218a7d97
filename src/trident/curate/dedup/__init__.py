"""Dedup stages: exact (exact.ExactDedup, `exact_dedup`) and fuzzy (fuzzy.FuzzyDedup, `fuzzy_dedup`;
fuzzy_distributed.run_distributed on Ray workers).

Below them: keys (keep priority, document keys), partitions (hash-partition files), drop_rows
(shards rewritten without dropped rows), components (connected components), minhash (MinHasher,
LSH buckets) over shingles and shingle_batch, and kernels/ (the compiled loops and their build).
"""
