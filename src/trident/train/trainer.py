"""The training loop: ramp-up, gradient accumulation, clipping, logging, validation, checkpoints.

The same loop runs one process or a 3D grid: the model is built per pipeline stage with the mesh's
tensor-parallel context; `forward_backward` runs the micro-batches (in order, or through the
pipeline executor); `finalize_gradients` does the cross-rank reductions; one optimizer step follows.
Samples are addressed by global index (consumed samples + position in the batch), so every layout
and a resumed run see exactly the same data.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from trident.checkpoint.format import build_trainer_state
from trident.checkpoint.model_config import model_files, model_tokenizer, start_checkpoint
from trident.checkpoint.resume import load_checkpoint
from trident.checkpoint.writer import CheckpointWriter, SaveError
from trident.config import Config, ConfigError, save_config
from trident.data.lineage import batch_documents
from trident.flops import block_weights, model_flops
from trident.hardware import UnknownGpuError, describe_peak, peak_tflops, refuse_unknown_gpu
from trident.parallel.hosts import check_tp_hosts
from trident.parallel.mesh import barrier, build_mesh, rank_device
from trident.parallel.parallelize import ParallelModel, parallelize
from trident.parallel.precision import Precision
from trident.parallel.sharding import full_shape
from trident.parallel.token_ids import check_token_ids
from trident.parallel.watch import failed_group
from trident.text.storage import location, make_folder
from trident.text.store_errors import StoreError
from trident.train import allocator
from trident.train.diagnostics import CorruptionError, RunDiagnostics
from trident.train.downstream import DownstreamEval
from trident.train.loggers import build_loggers
from trident.train.metrics import MetricsWriter, console_line, peak_memory_bytes
from trident.train.preemption import Preempted, StopRequests, stop_message, write_marker
from trident.train.lr_schedule import TrainSchedule


class Trainer:
    def __init__(self, config: Config, out_dir: str | Path, datasets=None, vocab_size: int | None = None,
                 log=print):
        self.config, self.out = config, location(out_dir)  # a local folder or a URL (s3://...)
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        config.validate(self.world)
        if config.train.threads:
            torch.set_num_threads(config.train.threads)
        self.device = rank_device(config.train.device)
        try:  # an unknown GPU's MFU would be a guess: refused before any work, its peak asked for
            refuse_unknown_gpu(self.device, config.train.peak_tflops)
        except UnknownGpuError as error:
            raise ConfigError(str(error)) from None
        self.mesh = build_mesh(config.parallel.tp, config.parallel.pp, config.parallel.dp, config.parallel.timeout_s,
                               config.parallel.dp_shard, cp=config.parallel.cp)
        self.log = log if self.mesh.rank == 0 else (lambda *a, **k: None)
        check_tp_hosts(self.mesh, config.parallel.allow_tp_across_hosts, self.log)
        if allocator.wanted(config.train.malloc_keep_freed, config.train.device):
            self.log(allocator.keep_freed_memory())  # again if `trident train` did it first: the same values
        self.schedule = TrainSchedule(config.train, config.model.seq_length)
        self.checkpoint_root = location(config.checkpoint.dir) if config.checkpoint.dir else self.out / "checkpoints"
        # the model's own files (tokenizer, HF side files) in the checkpoint it starts from travel on with it
        self.model_files = model_files(start_checkpoint(config.checkpoint.load, self.checkpoint_root))
        self.tokenizer_file = None
        self.train_data, self.valid_data = datasets if datasets is not None else self._build_data()
        if vocab_size is not None:
            config.model.vocab_size = vocab_size
        self.precision = Precision.from_config(config.train, self.device)
        self.model: ParallelModel = parallelize(config, self.mesh, self.device, self.precision)
        self.diagnostics = RunDiagnostics(config, self.mesh, self.model, self.out, self.device, self.log)
        self.downstream = DownstreamEval(config, self.tokenizer_file, self.log)  # config.eval: tasks scored in the run
        self.step, self.consumed_samples, self.consumed_tokens = 0, 0, 0
        self.writer = CheckpointWriter(self.checkpoint_root, self.mesh, config.checkpoint.keep_last,
                                       config.checkpoint.async_save, config.parallel.timeout_s)
        self.resume_bytes = 0  # bytes of checkpoint tensor files this rank read to resume
        self._maybe_resume()

    # ---- construction --------------------------------------------------------------------------
    def _build_data(self):
        from trident.data.build import build_datasets
        from trident.data.vocab_check import check_vocabulary

        cfg = self.config
        if not cfg.data.paths or not (cfg.data.tokenizer or "tokenizer.json" in self.model_files):
            raise ConfigError("config keys 'data.paths' and 'data.tokenizer' must be set to train "
                              "(see `trident tokenize`), or run `trident demo`")
        # the checkpoint's own tokenizer, else data.tokenizer; one that is not the checkpoint's is refused
        tokenizer, self.tokenizer_file = _user_input(
            lambda: model_tokenizer(self.model_files, cfg.data.tokenizer, self.out), "data.tokenizer")
        cfg.model.vocab_size = cfg.model.vocab_size or tokenizer.vocab_size
        try:
            for warning in check_vocabulary(cfg.data.paths, tokenizer, cfg.model.vocab_size):
                self.log(f"warning: {warning}")
        except ValueError as error:
            raise ConfigError(str(error)) from error
        train_samples = sum(self.schedule.batch_sizes())
        valid_samples = cfg.train.eval_iters * cfg.train.global_batch_size if cfg.train.eval_interval else 0
        build = lambda builder=True: _user_input(lambda: build_datasets(  # noqa: E731
            cfg.data, cfg.model.seq_length, train_samples, valid_samples, cfg.train.seed, builder), "data.paths")
        if self.world == 1:
            return build()
        # Rank 0 builds the index caches; the others then read them instead of repeating the work.
        # Its failure reaches every rank at once, instead of leaving them at a barrier until the timeout.
        datasets, failure = None, [None]
        if self.mesh.rank == 0:
            try:
                datasets = build()
            except (TrainError, ConfigError) as error:
                failure = [(type(error).__name__, str(error))]
        dist.broadcast_object_list(failure, src=0)
        if failure[0] is not None:
            kind, message = failure[0]
            raise (ConfigError if kind == "ConfigError" else TrainError)(message)
        return datasets if datasets is not None else build(builder=False)  # reads rank 0's cache

    # ---- one step ------------------------------------------------------------------------------
    def micro_batches(self, batch_size: int, dataset, start: int):
        """This DP rank's micro-batches of the global batch [start, start + batch_size); a context-parallel
        rank keeps only its chunks of each sequence (tokens and labels), cut on the host."""
        mesh, micro = self.mesh, self.config.train.micro_batch_size
        per_rank = batch_size // mesh.dp
        first = start + mesh.dp_rank * per_rank
        for offset in range(0, per_rank, micro):
            rows = np.stack([dataset[first + offset + i] for i in range(micro)]).astype(np.int64)
            check_token_ids(rows, self.model.layout.padded_vocab_size)  # on the host: the embedding skips it on accelerators
            sample = torch.from_numpy(rows)
            if mesh.cp > 1:
                yield tuple(self.model.sequence_part(x).to(self.device) for x in (sample[:, :-1], sample[:, 1:]))
                continue
            sample = sample.to(self.device)
            yield sample[:, :-1], sample[:, 1:]

    def train_step(self) -> dict:
        cfg, mesh, model = self.config, self.mesh, self.model
        batch_size = self.schedule.batch_size(self.consumed_tokens)
        lr = self.schedule.lr(self.consumed_tokens)
        start = time.perf_counter()
        micro = batch_size // (cfg.train.micro_batch_size * mesh.dp)
        batches = list(self.micro_batches(batch_size, self.train_data, self.consumed_samples))
        recording = self._start_timeline()
        self.diagnostics.phases.start()
        loss, grad_norm, overflow = model.train_step(batches, micro * mesh.dp, lr, self.diagnostics.phases.mark)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - start
        self.step += 1
        self.consumed_samples += batch_size
        self.consumed_tokens += batch_size * cfg.model.seq_length
        record = self._record(loss.item(), lr, grad_norm, batch_size, elapsed, overflow)
        record["dp_comm_bytes"] = model.dp_sent_bytes  # this rank's data-parallel traffic (docs/training.md)
        if mesh.cp > 1:
            record["cp_ring_bytes"] = model.cp_sent_bytes  # this rank's ring attention traffic (docs/training.md)
        # what `trident replay` needs to re-run this step: its global sample indices [start, start + count)
        record["samples"] = [self.consumed_samples - batch_size, batch_size]
        if recording:
            record |= self._finish_timeline(micro)
        return record

    def _start_timeline(self) -> bool:
        """With a pipeline, under logging.record_timeline or on a straggler check's step: time this
        step's compute on every stage."""
        wanted = self.config.logging.record_timeline or self.diagnostics.straggler_step(self.step + 1)
        if not (wanted and self.model.executor is not None):
            return False
        self.model.start_timeline()
        return True

    def _finish_timeline(self, micro: int) -> dict:
        """Gather the stages' boxes; rank 0 writes OUT/timeline_stepN.json. Returns measured and
        theoretical bubble fractions for the metrics line."""
        from trident.parallel.pipeline.timeline import Timeline
        from trident.parallel.pipeline.registry import schedule as pipeline_schedule

        p = self.config.parallel
        if not self.config.logging.record_timeline:  # a straggler check: this stage's boxes are enough
            self.diagnostics.boxes = self.model.finish_timeline(gather=False)
            return {}
        boxes = self.model.finish_timeline()
        self.diagnostics.boxes = [b for b in boxes if b.stage == self.mesh.pp_rank]
        timeline = Timeline(self.mesh.pp, micro, p.virtual_stages, p.schedule, "measured", boxes)
        if self.mesh.rank == 0:
            make_folder(self.out)
            timeline.save(self.out / f"timeline_step{self.step}.json")
        return {"bubble": timeline.bubble_fraction,
                "bubble_theory": pipeline_schedule(p.schedule).bubble(self.mesh.pp, micro, p.virtual_stages)}

    def _record(self, loss: float, lr: float, grad_norm: float, batch_size: int, elapsed: float,
                skipped: bool) -> dict:
        m = self.config.model
        tokens = batch_size * m.seq_length
        flops = model_flops(batch_size, m.seq_length, m.num_layers, m.hidden_size, m.padded_vocab_size(),
                            block_weights(m))
        tflops = flops / elapsed / self.world / 1e12
        peak = self._peak(tflops)
        return {"step": self.step, "loss": loss, "lr": lr, "grad_norm": grad_norm, "batch_size": batch_size,
                "tokens": self.consumed_tokens, "tokens_per_s": tokens / elapsed, "tflops": tflops,
                "mfu": tflops / peak if peak else 0.0, "skipped": skipped, "loss_scale": self.model.scaler.scale,
                "step_time_s": elapsed, "peak_memory_bytes": peak_memory_bytes(self.device)}

    def _peak(self, achieved: float = 0.0) -> float:
        """The peak MFU divides by. A CPU peak measured at start under other load can sit below what a
        step then achieves (MFU over 100%): it is raised to the achieved rate, said once."""
        if not hasattr(self, "_peak_tflops"):
            self._peak_tflops = peak_tflops(self.device, self.precision.dtype, self.config.train.peak_tflops)
        measured = self.device.type == "cpu" and not self.config.train.peak_tflops
        if measured and achieved > self._peak_tflops:
            self.log(f"MFU: a step ran at {achieved:.3g} TFLOP/s, above the CPU matmul peak measured at start "
                     f"({self._peak_tflops:.3g}, under other load): that rate is the peak from now on "
                     f"(train.peak_tflops sets it)")
            self._peak_tflops = achieved
        return self._peak_tflops

    @torch.no_grad()
    def evaluate(self) -> float | None:
        """Mean validation loss over eval_iters global batches (the same samples every time)."""
        cfg = self.config.train
        if self.valid_data is None or len(self.valid_data) == 0:
            return None
        self.model.eval()
        batch = min(cfg.global_batch_size, len(self.valid_data) // self.mesh.dp * self.mesh.dp)
        batch -= batch % (cfg.micro_batch_size * self.mesh.dp)
        if batch == 0:
            return None
        iters = max(1, min(cfg.eval_iters, len(self.valid_data) // batch))
        total = 0.0
        for i in range(iters):
            batches = list(self.micro_batches(batch, self.valid_data, i * batch))
            micro = batch // (cfg.micro_batch_size * self.mesh.dp)
            total += self.model.reduce_loss(self.model.forward_only(batches, micro * self.mesh.dp)).item()
        return total / iters

    # ---- the loop ------------------------------------------------------------------------------
    def train(self, stops: StopRequests | None = None) -> list[dict]:
        """Train to train.steps. `stops`: the stop-signal catcher installed at process start (else one
        is installed for the loop); a stop on a signal raises Preempted after the checkpoint."""
        cfg = self.config
        if self.mesh.rank == 0:
            make_folder(self.out)
        # A resumed run appends to its metrics; a fresh one starts the file anew.
        rank0 = self.mesh.rank == 0
        metrics = MetricsWriter(self.out / "metrics.jsonl" if rank0 else None, append=self.step > 0,
                                loggers=build_loggers(cfg, self.out) if rank0 else None,
                                upload_s=cfg.logging.metrics_upload_s)
        if rank0:
            save_config(cfg, self.out / "config.yaml")
            self.log(f"MFU is measured against {describe_peak(self.device, self.precision.dtype, cfg.train.peak_tflops)}")
            self.log(f"model: {sum(math.prod(full_shape(p)) for _, p in self.model.named_params):,} parameters on stage 0; "
                     f"layout dp={self.mesh.dp} pp={self.mesh.pp} "
                     f"{f'cp={self.mesh.cp} ' if self.mesh.cp > 1 else ''}tp={self.mesh.tp}; {cfg.train.steps} steps")
        records, own = [], stops is None
        stops = StopRequests().install() if own else stops
        stops.interval_s, stops.log = cfg.checkpoint.save_interval_minutes * 60.0, self.log
        stops.saved()  # the clock of time-based saves starts with the loop
        self.diagnostics.start()
        failed = True
        try:
            while self.step < cfg.train.steps:
                records.append(self._guarded(lambda: self._loop_step(metrics, stops)))
            self.writer.wait()  # a background save must be complete before the run counts as done
            barrier()
            failed = False
        finally:
            if own:
                stops.uninstall()
            self.diagnostics.stop()
            metrics.close(failed)  # a failed run's own error is the one reported
        return records

    def _loop_step(self, metrics: MetricsWriter, stops: StopRequests) -> dict:
        """One step with what follows it: faults due, validation, metrics, and the checkpoint that the
        interval, the clock (checkpoint.save_interval_minutes) or a stop signal on any rank asks for."""
        cfg = self.config
        marker = self.diagnostics.before_step(self.step + 1)
        record = self.train_step()
        self.diagnostics.after_update(self.step, marker)
        micro = record["batch_size"] // (cfg.train.micro_batch_size * self.mesh.dp)
        self.diagnostics.after_step(self.step, record, micro, lambda: batch_documents(self.train_data, *record["samples"]))
        if cfg.train.eval_interval and self.step % cfg.train.eval_interval == 0:
            record["val_loss"] = _user_input(self.evaluate, f"validation at step {self.step}")
        record |= self.downstream.at_step(self.step, self.model)
        metrics.write(record)
        if self.step % cfg.logging.log_interval == 0 or self.step == cfg.train.steps:
            self.log(console_line(record))
        stop, due = stops.agree(self.device)
        interval = cfg.checkpoint.save_interval
        if stop and self.step < cfg.train.steps:  # on the last step the run simply ends, saved
            self._stop(stop)
        if (interval and self.step % interval == 0) or self.step == cfg.train.steps or due:
            self.save()
            stops.saved()
            metrics.sync()  # on an object store: the lines so far are uploaded with the checkpoint
        return record

    def _stop(self, signal_name: str) -> None:
        """Every rank: finish any background save, save this step synchronously, leave OUT/preempted.json."""
        self.writer.wait()
        path = self.save(blocking=True)
        message = stop_message(signal_name, self.step, path)
        if self.mesh.rank == 0:
            write_marker(self.out, {"signal": signal_name, "step": self.step, "checkpoint": str(path)})
        barrier()
        raise Preempted(message)

    def _guarded(self, work):
        """work(); with several ranks, a failed or timed-out exchange (in the step, the stop agreement,
        a digest check, a save) becomes one clear error, after this rank's flight recorder is dumped."""
        if self.world == 1:
            return work()
        try:
            return work()
        except (RuntimeError, dist.DistBackendError) as error:
            if isinstance(error, OWN_ERRORS):
                raise
            group = failed_group(error)  # which group's exchange failed, when one did
            self.diagnostics.on_failure(f"step {self.step + 1} failed: {type(error).__name__} in {group or 'a collective'}")
            raise RankFailure(
                f"rank {self.mesh.rank} ({self.mesh.describe()}): step {self.step + 1} failed while exchanging "
                f"data with other ranks{f' in the {group}' if group else ''}: another rank probably died or hung "
                f"(parallel.timeout_s={self.config.parallel.timeout_s}). Resume from the last complete checkpoint with "
                f"checkpoint.load=auto (torchrun --max-restarts does this automatically). Cause: "
                f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}") from error

    # ---- checkpoints ---------------------------------------------------------------------------
    def trainer_state(self) -> dict:
        """The trainer's own counters; the model's values (scaler, optimizer steps) come with its pieces."""
        return build_trainer_state(step=self.step, consumed_samples=self.consumed_samples,
                                   consumed_tokens=self.consumed_tokens, config=self.config)

    def save(self, blocking: bool = False) -> Path:
        self.diagnostics.before_save(self.step)
        extra = self.model_files or ({"tokenizer.json": self.tokenizer_file} if self.tokenizer_file else None)
        path = self.writer.save(self.step, self.model.state_pieces(), self.trainer_state(), extra, blocking)
        # the next save copies them from this one (the newest is never pruned; the start checkpoint may be)
        self.model_files = {name: path / name for name in self.model_files}
        self.log(f"{'saving' if self.config.checkpoint.async_save and not blocking else 'saved'} checkpoint {path}")
        return path

    def _maybe_resume(self) -> None:
        # this rank's weights, owned optimizer ranges, RNG streams (same layout only), scaler; nothing else
        reader = load_checkpoint(self.config.checkpoint.load, self.checkpoint_root, self.model.load_pieces, self.log)
        if reader is None:
            return
        self.resume_bytes = reader.source.bytes_read  # this rank's share, not the checkpoint
        reader.close()
        state = reader.state
        self.step, self.consumed_samples = state["step"], state["consumed_samples"]
        self.consumed_tokens = state["consumed_tokens"]
        self.log(f"resumed from {reader.path} at step {self.step} (this rank read "
                 f"{self.resume_bytes / 2**20:.1f} MiB of its tensor files)")


class RankFailure(RuntimeError):
    """Another rank died or hung; this one stops instead of waiting forever."""


class TrainError(RuntimeError):
    """The run cannot go on because of its inputs (data, tokenizer, validation data); the message
    is one line naming what and where."""


def _user_input(work, what: str):
    """work(), with a file that is missing, unreadable or malformed reported as one TrainError line
    (ConfigError, already one clear line, passes through)."""
    try:
        return work()
    except ConfigError:
        raise
    except (OSError, ValueError, IndexError) as error:
        raise TrainError(f"{what}: {error}") from error


OWN_ERRORS = (RankFailure, TrainError, CorruptionError, SaveError, StoreError)  # through Trainer._guarded unchanged
