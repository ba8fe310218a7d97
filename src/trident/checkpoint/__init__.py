"""Checkpoints, shared by training, evaluation and inference: safetensors shards + JSON manifests,
written atomically, loadable in any parallel layout. A checkpoint sees a model only through its
state pieces (parallel/state.py: ParallelModel.state_pieces / load_pieces).

- format.py: folder layout, file names, format version, trainer state, manifest entries of pieces
- writer.py: CheckpointWriter / save_checkpoint (atomic, optionally in the background), pruning
- reader.py: CheckpointReader (reads a slice from whichever files hold it; `fill` loads state
  pieces, strict: no leftover tensors), resolve_checkpoint, load_for_inference
- resume.py: load_checkpoint (every rank loads its part; auto skips a damaged one on all ranks)
- slices.py, tiles.py, tensorfile.py: reading only the tiles a slice needs, each checked against its
  digest; the tile grid; safetensors written in bounded chunks and read by byte span
- integrity.py: file digests and manifest checks
"""
