"""Loading reads only what a rank loads: bytes read per rank across layouts stay within 1.25x of
that rank's share of the checkpoint (manifests aside); a damaged tile a rank loads is refused by
tensor and file, one it does not load does not stop it."""
import json

import pytest

from distributed import run_distributed
from train_fixtures import LAYOUTS, VOCAB, RandomTokens, tiny_config
from trident.checkpoint import tensorfile
from trident.text import storage
from trident.checkpoint.integrity import CheckpointError, DamagedCheckpoint
from trident.checkpoint.reader import CheckpointReader, complete_checkpoints, load_for_inference

BASE = ["train.global_batch_size=8", "train.micro_batch_size=2", "model.num_layers=4"]


def _trainer(overrides, out_dir, load=""):
    from trident.train.trainer import Trainer

    config = tiny_config(*BASE, *overrides, f"checkpoint.load={load}", f"checkpoint.dir={out_dir}/ckpt")
    return Trainer(config, out_dir, datasets=(RandomTokens(config.model.seq_length), None), vocab_size=VOCAB,
                   log=lambda *a: None)


def _save(rank, world, overrides, out_dir):
    trainer = _trainer(overrides, out_dir)
    trainer.train_step()
    trainer.save()


class CountingFile:
    """A file opened for reading whose read() calls add to `counter`."""

    def __init__(self, handle, counter):
        self.handle, self.counter = handle, counter

    def read(self, *args):
        data = self.handle.read(*args)
        self.counter[0] += len(data)
        return data

    def readinto(self, buffer):
        count = self.handle.readinto(buffer)
        self.counter[0] += count
        return count

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


def _load_counting(rank, world, overrides, out_dir, load):
    """(bytes this rank read from the checkpoint's tensor files while resuming, its share: its
    weights' and owned optimizer ranges' bytes as saved)."""
    import builtins

    from trident.parallel.state import TENSOR_KINDS

    counted, real_open = [0], builtins.open

    def counting_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        tensor_file = str(file).startswith(load) and str(file).endswith(".safetensors")
        return CountingFile(handle, counted) if tensor_file and "r" in mode else handle

    builtins.open = counting_open
    try:
        trainer = _trainer(overrides, out_dir, load)
    finally:
        builtins.open = real_open
    share = sum(piece.tensor.numel() * piece.tensor.element_size() for piece in trainer.model.state_pieces()
                if piece.kind in TENSOR_KINDS)  # weights and owned Adam ranges, as loaded
    return counted[0], share


def _run(layout, fn, *args):
    world, overrides = LAYOUTS[layout]
    if world == 1:
        return [fn(0, 1, overrides, *args)]
    return run_distributed(fn, world, overrides, *args, timeout=150)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("source,target", [("tp2_pp2", "tp4"), ("pp2_dp2_zero1", "tp2"), ("single", "tp2_pp2_dp2")])
def test_each_rank_reads_at_most_a_quarter_more_than_its_share(source, target, tmp_path):
    _run(source, _save, str(tmp_path / "a"))
    path = complete_checkpoints(tmp_path / "a" / "ckpt")[-1]
    total = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    for rank, (read, share) in enumerate(_run(target, _load_counting, str(tmp_path / "b"), str(path))):
        print(f"{source}->{target} rank {rank}: read {read} B, share {share} B ({read / share:.3f}x), "
              f"checkpoint {total} B")
        assert 0 < read <= 1.25 * share, (rank, read, share, total)
        assert read < total  # not the whole checkpoint


@pytest.fixture
def saved(tmp_path):
    trainer = _trainer([], tmp_path)
    trainer.train_step()
    trainer.save()
    return complete_checkpoints(tmp_path / "ckpt")[-1]


def _flip_byte(path, file, key, fraction):
    """Flip one byte `fraction` of the way into tensor `key`'s data (found through the manifest)."""
    entry = next(e for e in json.loads((path / "manifest-rank0.json").read_text())["tensors"] if e["key"] == key)
    first, end = entry["span"]
    data = bytearray((path / file).read_bytes())
    data[first + int((end - first) * fraction)] ^= 0xFF
    (path / file).write_bytes(bytes(data))


def test_a_damaged_tile_is_refused_only_where_it_is_read(saved):
    name = "blocks.1.mlp.fc1.weight"
    _flip_byte(saved, "model-dp0-pp0-tp0.safetensors", name, 0.75)
    reader = CheckpointReader(saved, verify="loaded")  # opening reads no tensor data
    rows, cols = reader.full_shape(name)
    reader.read(name, "model", [0, 0], (rows // 2, cols))  # the first half (e.g. TP rank 0 of 2) is intact
    reader.read("blocks.0.mlp.fc1.weight")
    with pytest.raises(DamagedCheckpoint, match=f"model-dp0-pp0-tp0.safetensors: tensor '{name}'.*corrupted"):
        reader.read(name, "model", [rows // 2, 0], (rows // 2, cols))
    with pytest.raises(CheckpointError, match="content digest differs"):
        CheckpointReader(saved)  # the whole-checkpoint check still sees it


def test_an_optimizer_tile_damage_stops_resume_but_not_eval(saved, tmp_path):
    key = "blocks.0.attention.qkv.weight/exp_avg/0"
    _flip_byte(saved, "optim-dp0-pp0-tp0.safetensors", key, 0.5)
    load_for_inference(saved)  # eval and export read the weights only
    with pytest.raises(CheckpointError, match=f"optim-dp0-pp0-tp0.safetensors: tensor '{key}'.*corrupted"):
        _trainer([], tmp_path / "resume", load=str(saved))


def test_files_stay_plain_safetensors_written_in_bounded_chunks(tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file

    tensors = {"a": torch.randn(300, 7), "b": torch.randn(5).to(torch.bfloat16), "c": torch.zeros(0)}
    writes = []
    real_open = open

    class Spy:
        def __init__(self, handle):
            self.handle = handle

        def write(self, block):
            writes.append(len(block))
            return self.handle.write(block)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    monkeypatch.setattr(storage, "open", lambda path, mode: Spy(real_open(path, mode)), raising=False)
    digest, spans = tensorfile.write_tensors(tmp_path / "x.safetensors", tensors, chunk_bytes=1000)
    loaded = load_file(tmp_path / "x.safetensors")
    assert all(torch.equal(loaded[k], tensors[k]) and loaded[k].dtype == tensors[k].dtype for k in tensors)
    assert max(writes[2:]) <= 1000 and sum(writes) == digest["bytes"] == (tmp_path / "x.safetensors").stat().st_size
    data = (tmp_path / "x.safetensors").read_bytes()
    assert data[spans["b"][0]:spans["b"][1]] == tensors["b"].view(torch.uint8).numpy().tobytes()


def _resume_tp2(rank, world, out_dir, load):
    """(step resumed at, lines logged) on each rank, or the CheckpointError it ended with."""
    lines = []
    from trident.train.trainer import Trainer

    config = tiny_config(*BASE, "parallel.tp=2", f"checkpoint.load={load}", f"checkpoint.dir={out_dir}/ckpt")
    try:
        trainer = Trainer(config, f"{out_dir}/rank{rank}", datasets=(RandomTokens(config.model.seq_length), None),
                          vocab_size=VOCAB, log=lines.append)
    except CheckpointError as error:
        return str(error)
    return trainer.step, lines


@pytest.mark.timeout(120)
def test_a_tile_only_one_rank_loads_makes_every_rank_refuse_or_fall_back_together(tmp_path):
    trainer = _trainer([], tmp_path)
    for _ in range(2):
        trainer.train_step()
        trainer.save()
    older, newest = complete_checkpoints(tmp_path / "ckpt")
    name = "blocks.1.mlp.fc1.weight"  # column-parallel: under tp2 only TP rank 1 loads its second half
    _flip_byte(newest, "model-dp0-pp0-tp0.safetensors", name, 0.75)
    for message in run_distributed(_resume_tp2, 2, str(tmp_path), str(newest), timeout=100):
        assert isinstance(message, str) and f"tensor '{name}'" in message and "corrupted" in message
    (step0, lines), (step1, _) = run_distributed(_resume_tp2, 2, str(tmp_path), "auto", timeout=100)
    assert step0 == step1 == 1
    skipped = [line for line in lines if "skipped" in line]  # rank 0 read nothing damaged, yet says why
    assert len(skipped) == 1 and newest.name in skipped[0] and name in skipped[0]
    assert any(f"resumed from {older}" in line for line in lines)


def _read_my_half(rank, world, path, name):
    from trident.checkpoint.resume import apply_on_every_rank

    reader = CheckpointReader(path, verify="loaded")
    rows, cols = reader.full_shape(name)
    try:  # as `trident eval` across ranks loads: each rank its half
        apply_on_every_rank(reader, lambda r: r.read(name, "model", [rank * rows // 2, 0], (rows // 2, cols)))
    except DamagedCheckpoint as error:
        return str(error)
    return "loaded"


@pytest.mark.timeout(60)
def test_a_damaged_slice_on_one_rank_stops_every_rank_of_a_parallel_load(saved):
    name = "blocks.1.mlp.fc1.weight"
    _flip_byte(saved, "model-dp0-pp0-tp0.safetensors", name, 0.75)
    for message in run_distributed(_read_my_half, 2, str(saved), name, timeout=50):
        assert f"tensor '{name}'" in message and "corrupted" in message
