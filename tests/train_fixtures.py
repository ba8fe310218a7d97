"""The helpers tests share (no test module imports another): tiny configs and synthetic data for
in-process training, layouts and their reference runs, faulty ranks, and running `trident train` as a
user would (a tiny tokenized corpus, the command line, a process to watch, what it left behind)."""
from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from distributed import run_distributed
from trident.config import load_config

VOCAB = 96


class RandomTokens:
    """Deterministic synthetic samples: index -> seq_len+1 tokens."""

    def __init__(self, seq_length, n=4096):
        self.data = np.random.default_rng(0).integers(0, VOCAB, size=(n, seq_length + 1))

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i]


def tiny_config(*overrides):
    """The tiny preset for tests: on the CPU (TRIDENT_TEST_DEVICE=auto, as benchmarks/gpu.sh sets for
    its single-process tests, picks the GPU where there is one; forked ranks always say cpu)."""
    base = ["model.hidden_dropout=0.0", "model.attention_dropout=0.0", "train.steps=5", "train.lr=1e-2",
            "train.warmup_tokens=64", "checkpoint.save_interval=0", "logging.log_interval=1000",
            f"model.vocab_size={VOCAB}", f"train.device={os.environ.get('TRIDENT_TEST_DEVICE', 'cpu')}"]
    return load_config("tiny", base + list(overrides))


def train_and_collect(config, out_dir, steps_of_grads=False):
    """Train; return per-step losses and every parameter re-assembled to full size (rank order)."""
    from trident.train.trainer import Trainer

    data = RandomTokens(config.model.seq_length)
    trainer = Trainer(config, out_dir, datasets=(data, None), vocab_size=VOCAB, log=lambda *a: None)
    records = [trainer.train_step() for _ in range(config.train.steps)]
    return [r["loss"] for r in records], gather_full_params(trainer)


def full_tensor(trainer, param, tensor):
    """`tensor` (the parameter's data or gradient) re-assembled across the TP group, as numpy."""
    if getattr(param, "tp_dim", None) is not None:
        parts = [torch.empty_like(tensor) for _ in range(param.tp_size)]
        dist.all_gather(parts, tensor.contiguous(), group=trainer.mesh.group("tp"))
        tensor = torch.cat(parts, dim=param.tp_dim)
    return tensor.numpy().copy()


def gather_full_params(trainer):
    return {name: full_tensor(trainer, param, param.detach()) for name, param in trainer.model.named_params}


# Batches of 8 then 16 sequences: both sizes of the ramp in 3 steps (a further step repeats the last one's code
# paths, and costs a multi-rank layout test hundreds of gloo collectives of 1-8 ms each on 2 cores)
RAMP = ["train.global_batch_size=16", "train.micro_batch_size=2", "train.rampup_batch_size=[8,8,256]",
        "train.steps=3", "model.num_layers=4"]


# tiny's shape with Llama-style blocks: rotary positions, RMSNorm, SwiGLU, 2 key/value heads for 4 query
# heads (sharded at tp=2, replicated at tp=4), an untied head, no biases
LLAMA = ["model.position=rope", "model.norm=rmsnorm", "model.mlp=swiglu", "model.num_kv_heads=2",
         "model.ffn_hidden_size=64", "model.tie_embeddings=false", "model.bias=false"]
MQA = [*LLAMA, "model.num_kv_heads=1"]  # multi-query: one key/value head, replicated at any tp


def trained(config, out_dir):
    """A Trainer on RandomTokens after config.train.steps steps, and its steps' records."""
    from trident.train.trainer import Trainer

    trainer = Trainer(config, out_dir, datasets=(RandomTokens(config.model.seq_length), None),
                      vocab_size=VOCAB, log=lambda *a: None)
    return trainer, [trainer.train_step() for _ in range(config.train.steps)]


def run_summary(trainer, records):
    """Losses, batch sizes, the full parameters of the whole model (gathered to every rank) and the
    global gradient norms of a run."""
    return ([r["loss"] for r in records], [r["batch_size"] for r in records], all_parameters(trainer),
            [r["grad_norm"] for r in records])


def train_full(config, out_dir):
    """Train; return run_summary's figures."""
    return run_summary(*trained(config, out_dir))


class DataParallelTraffic:
    """`with DataParallelTraffic(group) as traffic:` counts the bytes this rank sends in the
    all-reduces, reduce-scatters and all-gathers issued on `group` (ring algorithms: (n-1)/n of the
    full buffer, twice for an all-reduce), by wrapping torch.distributed's functions; the one-element
    loss all-reduce is not gradient or weight traffic and is left out. `per_step` after each step."""

    WRAPPED = {"all_reduce": 2, "reduce_scatter_tensor": 1, "all_gather_into_tensor": 1}

    def __init__(self, group):
        self.group, self.sent, self.per_step, self.saved = group, 0, [], {}

    def __enter__(self):
        size = dist.get_world_size(self.group)
        for name, rings in self.WRAPPED.items():
            original = self.saved[name] = getattr(dist, name)

            def counted(*args, original=original, rings=rings, name=name, **kwargs):
                group = kwargs.get("group", args[2] if len(args) > 2 and name != "all_reduce" else None)
                full = args[1] if name == "reduce_scatter_tensor" else args[0]  # the whole buffer
                if group is self.group and full.numel() > 1:
                    self.sent += rings * full.numel() * full.element_size() * (size - 1) // size
                return original(*args, **kwargs)
            setattr(dist, name, counted)
        return self

    def step(self) -> None:
        self.per_step.append(self.sent)
        self.sent = 0

    def __exit__(self, *exc):
        for name, original in self.saved.items():
            setattr(dist, name, original)
        return False


def adam_state_sums(trainer) -> list[float]:
    """Sums of Adam's m and v over the whole model, from every rank's saved (primary) state pieces."""
    from trident.parallel.state import by_kind

    pieces = [p for p in by_kind(trainer.model.state_pieces(), "exp_avg", "exp_avg_sq") if p.primary]
    sums = torch.tensor([sum(float(p.tensor.double().sum()) for p in pieces if p.kind == kind)
                         for kind in ("exp_avg", "exp_avg_sq")], dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(sums)
    return sums.tolist()


def all_parameters(trainer):
    """name -> full tensor of every weight, gathered to every rank (full_state's "weight")."""
    return full_state(trainer, "weight")


def full_state(trainer, kind: str) -> dict:
    """name -> full tensor of one kind of state (weight, master, exp_avg, exp_avg_sq), assembled on
    every rank from every rank's state pieces (TP shards, and ZeRO's owned flat parts). Copies of the
    same elements (DP and TP replicas, the tied embedding's two stages) must be bit-identical."""
    from trident.parallel.state import by_kind

    mine = [(p.name, p.full_shape, p.offsets, p.shape, p.flat, p.tensor.detach().float().numpy().copy())
            for p in by_kind(trainer.model.state_pieces(), kind)]
    gathered = [None] * (dist.get_world_size() if dist.is_initialized() else 1)
    if dist.is_initialized():
        dist.all_gather_object(gathered, mine)
    else:
        gathered = [mine]
    full: dict = {}
    for name, shape, offsets, local, flat, values in (piece for rank in gathered for piece in rank):
        block = full.setdefault(name, np.full(shape, np.nan, dtype=np.float32))
        where = tuple(slice(o, o + n) for o, n in zip(offsets, local))
        region = block[where].copy().reshape(-1)
        a, b = flat if flat is not None else (0, region.size)
        held = region[a:b]
        copied = ~np.isnan(held)
        np.testing.assert_array_equal(held[copied], values.reshape(-1)[copied], err_msg=f"copies of {name} diverged")
        region[a:b] = values.reshape(-1)
        block[where] = region.reshape(block[where].shape)
    for name, block in full.items():
        assert not np.isnan(block).any(), f"{name}: not every element of its {kind} is held by some rank"
    return full


def assert_matches(results, reference):
    ref_losses, ref_batches, ref_params, ref_norms = reference
    assert len(set(ref_batches)) > 1  # the ramp-up changed the number of micro-batches
    for losses, batches, params, norms in results:
        assert batches == ref_batches
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
        np.testing.assert_allclose(norms, ref_norms, rtol=1e-4)
        assert params.keys() == ref_params.keys()
        for name, value in params.items():
            expected = ref_params[name]
            if name.endswith("qkv.bias"):  # key bias: zero true gradient, see test_tensor_parallel
                value, expected = value.reshape(4, 3, -1)[:, [0, 2]], expected.reshape(4, 3, -1)[:, [0, 2]]
            np.testing.assert_allclose(value, expected, rtol=1e-4, atol=2e-5, err_msg=name)


FAULT_TIMEOUT_S = 3  # parallel.timeout_s of faulty_rank: how long rank 0 waits for a hung peer


def faulty_rank(rank, world, fault, layout="parallel.dp=2"):
    """Rank 1 dies or hangs before step 2 (TRIDENT_INJECT); rank 0 trains on: (its error message, seconds to it)."""
    from trident.train.trainer import RankFailure, Trainer

    os.environ["TRIDENT_INJECT"] = f"rank=1,step=2,kind={'exit' if fault == 'dies' else 'hang'}"
    config = tiny_config(layout, "train.steps=50", f"parallel.timeout_s={FAULT_TIMEOUT_S}")
    trainer = Trainer(config, f"/tmp/unused-faults-{rank}",
                      datasets=(RandomTokens(32), None), vocab_size=VOCAB, log=lambda *a: None)
    trainer.train_step()
    start = time.time()
    try:
        trainer.train()
    except RankFailure as error:
        return str(error), time.time() - start
    return "no error", time.time() - start


STEPS, STOP = 4, 2  # saved after the ramp's both batch sizes, resumed for two more steps


BASE = ["train.global_batch_size=16", "train.micro_batch_size=2", "train.rampup_batch_size=[8,8,256]",
        f"train.steps={STEPS}", "model.num_layers=4"]


def make_trainer(config, out_dir):
    from trident.train.trainer import Trainer

    return Trainer(config, out_dir, datasets=(RandomTokens(config.model.seq_length), None), vocab_size=VOCAB,
                   log=lambda *a: None)


def run_steps(overrides, out_dir, stop=None, load="", ckpt=None, with_trainer=False):
    """Train from `load` (or scratch) up to `stop` steps (or the end); save there (in `ckpt`, by
    default OUT/ckpt); return losses (and the trainer, `with_trainer`)."""
    trainer = make_trainer(tiny_config(*BASE, *overrides, f"checkpoint.load={load}",
                                       f"checkpoint.dir={ckpt or f'{out_dir}/ckpt'}"), out_dir)
    losses = []
    while trainer.step < (stop or STEPS):
        losses.append(trainer.train_step()["loss"])
    if stop:
        trainer.save()
        trainer.writer.wait()
    return (losses, trainer) if with_trainer else losses


def rank_steps(rank, world, overrides, out_dir, stop, load):
    return run_steps(overrides, out_dir, stop, load)


LAYOUTS = {
    "single": (1, []),
    "tp2_pp2": (4, ["parallel.tp=2", "parallel.pp=2"]),
    "tp4": (4, ["parallel.tp=4"]),
    "pp2_dp2_zero1": (4, ["parallel.pp=2", "parallel.dp=2", "parallel.zero_stage=1"]),
    "tp2": (2, ["parallel.tp=2"]),
    "tp2_pp2_dp2": (8, ["parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "parallel.zero_stage=1"]),
    "dp2_zero1": (2, ["parallel.dp=2", "parallel.zero_stage=1"]),
    "dp2_zero3": (2, ["parallel.dp=2", "parallel.zero_stage=3"]),
    "pp2_dp2_zero3": (4, ["parallel.pp=2", "parallel.dp=2", "parallel.zero_stage=3"]),
    "dp2": (2, ["parallel.dp=2"]),
    "pp2": (2, ["parallel.pp=2"]),
}


def run_layout(name, out_dir, stop=None, load=""):
    world, overrides = LAYOUTS[name]
    if world == 1:
        return run_steps(overrides, out_dir, stop, load)
    return run_distributed(rank_steps, world, overrides, str(out_dir), stop, load, timeout=150)[-1]


MODULES = ("json", "collections", "functools", "argparse", "pathlib", "itertools", "textwrap", "string")


def stdlib_text() -> str:
    """Real English prose: docstrings of a few standard-library modules and their members."""
    parts = []
    for name in MODULES:
        module = __import__(name)
        parts.append(inspect.getdoc(module) or "")
        for member in sorted(vars(module)):
            doc = inspect.getdoc(getattr(module, member)) if not member.startswith("_") else None
            if doc:
                parts.append(doc)
    return "\n\n".join(parts)


class Windows:
    """Token windows of seq_len + 1 cut from one encoded text (the trainer's dataset interface)."""

    def __init__(self, ids, seq_length):
        usable = (len(ids) - 1) // seq_length * seq_length
        starts = np.arange(0, usable, seq_length)
        self.rows = np.stack([ids[s:s + seq_length + 1] for s in starts])

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i % len(self.rows)]


WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def tiny_corpus(root: Path) -> Path:
    """root/data.bin/.idx and root/tok.json: 80 documents of 60 words, a 300-token BPE."""
    from trident.data.build import tokenize_files
    from trident.data.tokenizer import train_tokenizer

    lines = [json.dumps({"text": " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(60))}) for i in range(80)]
    (root / "c.jsonl").write_text("\n".join(lines) + "\n")
    train_tokenizer([root / "c.jsonl"], 300, root / "tok.json")
    tokenize_files([root / "c.jsonl"], root / "data", root / "tok.json", progress=False)
    return root


def train_command(corpus: Path, out: Path, *overrides: str, nproc: int = 1, extra: tuple = ()) -> list[str]:
    """`trident train tiny` on the corpus; LR decay fixed in tokens so train.steps does not change it."""
    return [sys.executable, "-m", "trident", "train", "tiny", f"data.paths=[{corpus / 'data'}]",
            f"data.tokenizer={corpus / 'tok.json'}", "train.decay_tokens=100000", "logging.log_interval=1",
            "parallel.timeout_s=30", "train.peak_tflops=1", "train.device=cpu", *overrides, "--nproc", str(nproc),
            "--out", str(out), *extra]


def start(command: list[str], **env) -> subprocess.Popen:
    """A run in a session of its own (as a terminal job), one thread a rank, on the CPU (no GPU for torch)."""
    return subprocess.Popen(command, env=dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for_steps(out: Path, steps: int, proc: subprocess.Popen, timeout: float = 90) -> None:
    """Until OUT/metrics.jsonl has `steps` lines (raises if the run ends or time runs out first)."""
    deadline = time.time() + timeout
    metrics = out / "metrics.jsonl"
    while time.time() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= steps:
            return
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) before step {steps}:\n{proc.stderr.read()}")
        time.sleep(0.1)
    raise AssertionError(f"no step {steps} within {timeout}s")


def losses(out: Path) -> dict[int, float]:
    """step -> loss from OUT/metrics.jsonl (a resumed step keeps its last value)."""
    return {r["step"]: r["loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains `text` (a run's output folder)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


def wait_until_gone(text: str, timeout: float) -> list[int]:
    """Waits for every process mentioning `text` to end; returns those still alive at the timeout."""
    deadline = time.time() + timeout
    while (alive := processes_mentioning(text)) and time.time() < deadline:
        time.sleep(0.2)
    return alive


def kill_all(text: str) -> None:
    """Clean-up after a failed test: no run outlives it."""
    for pid in processes_mentioning(text):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
