"""benchmarks/mfu.py --compile reports whether train.compile took effect: compiled_blocks counts the
blocks whose forward torch.compile wraps (the way build_model_chunks applies it), so a compiled run
is never reported as "NOT applied"."""
import torch

from train_fixtures import tiny_config
from trident.parallel.layout import rank_layout
from trident.parallel.mesh import Mesh
from trident.parallel.parallelize import build_model_chunks, compiled_blocks


def _chunks(compile: bool, config):
    layout = rank_layout(config, Mesh())
    return build_model_chunks(config.model, layout, Mesh().tp_context(), seed=0, compile=compile,
                              device=torch.device("cpu"))


def test_compiled_blocks_counts_every_wrapped_block_and_none_without_compile():
    config = tiny_config("model.num_layers=3")
    compiled, plain = _chunks(True, config), _chunks(False, config)
    assert compiled_blocks(compiled) == 3
    assert compiled_blocks(plain) == 0
    # torch.compile's module-level marks (what the benchmark looked for) are absent either way
    assert not any(getattr(m, "_compiled_call_impl", None) is not None or hasattr(m, "_orig_mod")
                   for chunk in compiled for m in chunk.modules())
