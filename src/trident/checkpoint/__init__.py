"""Checkpoints, shared by training, evaluation and inference: safetensors shards + JSON manifests,
written atomically, loadable in any parallel layout.

- format.py: folder layout, file names, format version, trainer-state and optimizer-piece dicts
- writer.py: CheckpointWriter / save_checkpoint (atomic, optionally in the background), pruning
- reader.py: CheckpointReader, resolve_checkpoint, open_checkpoint (auto skips damaged ones),
  load_model_weights (strict: no leftover tensors) / load_optimizer / load_for_inference
- integrity.py: file digests and manifest checks; state.py: optimizer pieces and RNG streams
"""
