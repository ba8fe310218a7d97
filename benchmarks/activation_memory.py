"""Activation memory and step time of train.activation_checkpointing = none | selective | full.

Memory, per micro-batch, on the model of trident.model.gpt.build_model (fp32, dropout 0):
- live activation bytes: every tensor an op creates is tracked (a TorchDispatchMode sees each op's
  outputs; a weakref finaliser sees the storage freed), so "live after forward" is what the forward
  left in memory for the backward, whichever mechanism holds it (autograd's saved tensors, or the
  inputs torch.utils.checkpoint keeps for recomputation); "peak" is the most live during forward +
  backward, recomputation included;
- saved-tensor bytes: what autograd's saved_tensors_hooks see (unique storages, parameters
  excluded): for `full` that is the block input torch.utils.checkpoint saves (inside the region
  its own hooks take over and nothing is kept). Live bytes count every storage still held, saved
  or not, so they are the larger, complete figure.
Per transformer layer = (model with L layers - model with L/2 layers) / (L/2), so the embedding,
head and loss are left out. Reference: full checkpointing keeps one block input per layer,
s*b*h elements (4 bytes each in fp32; docs/reference.md's 2*b*s*h bytes in 16-bit).

Time: trident's Trainer.train_step with each mode, cycled (none, selective, full, none, ...) so load
drift hits all alike; median CPU time (1 thread) and wall time, and the ratio to `none`.

    python benchmarks/activation_memory.py [--quick] [--steps N]
"""
from __future__ import annotations

import argparse
import tempfile
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from common import RandomTokens, Timer, emit_json, load_average, make_config, median, print_table

MODES = ("none", "selective", "full")
MODEL = ["model.num_layers=4", "model.hidden_size=256", "model.num_heads=8", "model.seq_length=256",
         "model.vocab_size=4096", "train.micro_batch_size=2", "train.global_batch_size=4"]
QUICK_MODEL = ["model.num_layers=4", "model.hidden_size=128", "model.num_heads=4", "model.seq_length=128",
               "model.vocab_size=1024", "train.micro_batch_size=2", "train.global_batch_size=4"]


class LiveTensors(TorchDispatchMode):
    """Bytes of storages created by ops and still alive (refcounted by tensor objects), and the peak."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, list[int]] = {}
        self.bytes = self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor) and tensor.device.type != "meta":
                storage = tensor.untyped_storage()
                key = storage.data_ptr()
                entry = self.live.get(key)
                if entry is None:
                    entry = self.live[key] = [0, storage.nbytes()]
                    self.bytes += entry[1]
                    self.peak = max(self.peak, self.bytes)
                entry[0] += 1
                weakref.finalize(tensor, self._free, key)
        return out

    def _free(self, key: int) -> None:
        entry = self.live[key]
        entry[0] -= 1
        if entry[0] == 0:
            self.bytes -= entry[1]
            del self.live[key]


class SavedTensors:
    """Bytes autograd saves for backward through saved_tensors_hooks (unique storages, no parameters)."""

    def __init__(self, parameters):
        self.excluded = {p.untyped_storage().data_ptr() for p in parameters}
        self.seen: set[int] = set()
        self.bytes = 0

    def pack(self, tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in self.excluded and storage.data_ptr() not in self.seen:
            self.seen.add(storage.data_ptr())
            self.bytes += storage.nbytes()
        return tensor

    @staticmethod
    def unpack(tensor):
        return tensor


def memory_of(overrides: list[str], layers: int, mode: str) -> dict:
    """One micro-batch forward + backward of a fresh model: live and saved activation bytes."""
    from trident.model.gpt import build_model

    config = make_config("demo", overrides + [f"model.num_layers={layers}"])
    m = config.model
    model = build_model(m, m.padded_vocab_size(), config.train.seed, activation_checkpointing=mode)
    model.train()
    data = RandomTokens(m.seq_length, m.vocab_size)
    rows = torch.stack([torch.from_numpy(data[i]) for i in range(config.train.micro_batch_size)])
    saved, live = SavedTensors(model.parameters()), LiveTensors()
    with live, torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
        loss = model(rows[:, :-1], rows[:, 1:]).float().mean()
        after_forward, forward_peak = live.bytes, live.peak
        loss.backward()
    return {"live_after_forward": after_forward, "forward_peak": forward_peak, "peak": live.peak,
            "saved_tensor_bytes": saved.bytes}


def step_times(overrides: list[str], steps: int, warmup: int) -> dict:
    """Median wall and CPU seconds of Trainer.train_step per mode, modes cycled step by step."""
    from trident.train.trainer import Trainer

    trainers, times, losses = {}, {mode: {"wall": [], "cpu": []} for mode in MODES}, {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as out:
        for mode in MODES:
            config = make_config("demo", overrides + [f"train.activation_checkpointing={mode}",
                                                      "train.rampup_batch_size=null", "train.eval_interval=0",
                                                      "train.steps=1000000", "train.device=cpu", "train.threads=1"])
            m = config.model
            trainers[mode] = Trainer(config, f"{out}/{mode}", datasets=(RandomTokens(m.seq_length, m.vocab_size), None),
                                     vocab_size=m.vocab_size, log=lambda *a: None)
        for index in range(warmup + steps):
            for mode in MODES:
                with Timer() as timer:
                    losses[mode].append(trainers[mode].train_step()["loss"])
                if index >= warmup:
                    times[mode]["wall"].append(timer.wall)
                    times[mode]["cpu"].append(timer.cpu)
    return {mode: {"wall_s": median(t["wall"]), "cpu_s": median(t["cpu"]), "losses": losses[mode], **t}
            for mode, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller model, fewer steps")
    parser.add_argument("--steps", type=int, default=0, help="timed steps per mode (default 5, quick 2)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = QUICK_MODEL if args.quick else MODEL
    steps = args.steps or (2 if args.quick else 5)
    config = make_config("demo", model)
    m, b = config.model, config.train.micro_batch_size
    layers = m.num_layers
    memory = {mode: {"L": memory_of(model, layers, mode), "L/2": memory_of(model, layers // 2, mode)} for mode in MODES}
    times = step_times(model, steps, warmup=1)
    block_input = m.seq_length * b * m.hidden_size * 4
    rows, results = [], {}
    for mode in MODES:
        whole, half = memory[mode]["L"], memory[mode]["L/2"]
        per_layer = {key: (whole[key] - half[key]) / (layers - layers // 2) for key in whole}
        results[mode] = {"whole_model": whole, "half_model": half, "per_layer": per_layer, "time": times[mode],
                         "cpu_time_ratio_vs_none": times[mode]["cpu_s"] / times["none"]["cpu_s"],
                         "wall_time_ratio_vs_none": times[mode]["wall_s"] / times["none"]["wall_s"],
                         "losses_equal_none": times[mode]["losses"] == times["none"]["losses"]}
        mib = 2**20
        rows.append([mode, f"{whole['live_after_forward'] / mib:.2f}", f"{per_layer['live_after_forward'] / mib:.3f}",
                     f"{per_layer['live_after_forward'] / block_input:.1f}",
                     f"{per_layer['saved_tensor_bytes'] / mib:.3f}", f"{whole['peak'] / mib:.2f}",
                     times[mode]["cpu_s"], f"{results[mode]['cpu_time_ratio_vs_none']:.2f}x",
                     f"{results[mode]['wall_time_ratio_vs_none']:.2f}x"])
    print_table(f"Activation memory per micro-batch (fp32, {layers} layers, s={m.seq_length} b={b} h={m.hidden_size}; "
                f"block input s*b*h*4 = {block_input / 2**20:.3f} MiB) and step time ({steps} steps/mode, medians)",
                ["checkpointing", "live after fwd MiB", "per layer MiB", "per layer / block input",
                 "saved-tensor hooks per layer MiB", "peak fwd+bwd MiB", "step CPU s", "CPU time vs none",
                 "wall time vs none"], rows)
    print("losses identical to none:", {mode: results[mode]["losses_equal_none"] for mode in MODES})
    emit_json("activation_memory", {"layers": layers, "seq": m.seq_length, "micro_batch": b, "hidden": m.hidden_size,
                                    "block_input_bytes": block_input, "results": results, "load": load_average()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
