"""`trident serve`: a checkpoint behind the OpenAI completions API, on its own TP x PP layout,
with continuous batching (trident.infer.batching) on the KV-cached engine (trident.infer.engine)."""
