"""Text utilities below data, tasks and curate: the one JSONL/compressed reader and n-gram hashing."""
