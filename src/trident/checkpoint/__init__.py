"""Checkpoints, shared by training, evaluation and inference: safetensors shards + JSON manifests,
written atomically, loadable in any parallel layout.

- format.py: folder layout, file names, format version, trainer-state and optimizer-piece dicts
- writer.py: CheckpointWriter / save_checkpoint (atomic, optionally in the background), pruning
- reader.py: CheckpointReader (reads a slice from whichever files hold it), resolve_checkpoint,
  load_model_weights (strict: no leftover tensors) / load_optimizer / load_for_inference
- resume.py: load_checkpoint (every rank loads its part; auto skips a damaged one on all ranks)
- slices.py, tiles.py, tensorfile.py: reading only the tiles a slice needs, each checked against its
  digest; the tile grid; safetensors written in bounded chunks and read by byte span
- integrity.py: file digests and manifest checks; state.py: optimizer pieces and RNG streams
"""
