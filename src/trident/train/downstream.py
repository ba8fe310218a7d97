"""Downstream evaluation during training: the config's `eval` section.

Every `eval.interval` steps the job scores `eval.tasks` at `eval.shots` on its own mesh: the
training model (this rank's chunks, in the same process group) is wrapped as a ParallelLM, the
evaluator trident.evaluate uses for `trident eval CKPT parallel.tp=...`, so no checkpoint is
written or read and the numbers are those `trident eval` gives for the step's checkpoint. The
training state is left as it was: the chunks' train/eval modes and the default RNG streams (torch
CPU, CUDA) are restored afterwards, and the model's tensor-parallel stream is checked unchanged, so
the run's losses do not change.
The tasks' files are read and every task/shot cell is checked when the trainer starts, so a
missing file stops the run before its first step rather than at its first evaluation.

Each evaluation adds `eval/<task>/<k>shot/<metric>` and `eval/seconds` (its cost) to the step's
metrics record, which goes to metrics.jsonl, TensorBoard and W&B (train/loggers.py).
"""
from __future__ import annotations

import time

from trident.config import Config, ConfigError
from trident.text.storage import location

CONSTRUCTION = "harness"  # lm-evaluation-harness's few-shot sampler, as `trident eval`'s default


def metric_key(task: str, shots: int, metric: str) -> str:
    """The metrics.jsonl / TensorBoard / W&B name of one score."""
    return f"eval/{task}/{shots}shot/{metric}"


class DownstreamEval:
    """The `eval` section at work; inert when eval.tasks is empty."""

    def __init__(self, config: Config, tokenizer_file=None, log=print):
        e = config.eval
        self.settings, self.log = e, log
        self.enabled = bool(e.tasks) and e.interval > 0
        self.lm = None
        if not self.enabled:
            return
        # the evaluation code is loaded only by runs that evaluate: every rank start pays for its imports
        from trident.evaluate.preflight import PreflightError, load_checked, plan_cells

        self.tokenizer_source = tokenizer_file or config.data.tokenizer
        if not self.tokenizer_source:
            raise ConfigError("config key 'eval.tasks': scoring tasks during training needs the tokenizer: "
                              "set data.tokenizer")
        self.data_path = location(e.data_dir) if e.data_dir else None
        try:
            self.cells = plan_cells(list(e.tasks), list(e.shots))
            self.loaded = load_checked(self.cells, self.data_path, e.limit or None, CONSTRUCTION)
        except PreflightError as error:
            where = f"eval.data_dir={e.data_dir}" if e.data_dir else "eval.data_dir unset: the Hugging Face hub"
            raise ConfigError(f"config key 'eval.tasks' ({where}): {error}") from None

    def due(self, step: int) -> bool:
        return self.enabled and step % self.settings.interval == 0

    def at_step(self, step: int, model) -> dict:
        """`eval/...` fields for the step's metrics record: the scores when an evaluation is due, else {}.
        Collective: every rank of the job calls it with the same step."""
        if not self.due(step):
            return {}
        start = time.perf_counter()
        modes, streams = [chunk.training for chunk in model.chunks], model.rng_states()
        try:
            record = self._score(self._model_lm(model))
        finally:  # the training state, whatever happened: dropout mode and every random stream
            for chunk, mode in zip(model.chunks, modes):
                chunk.train(mode)
            model.set_rng_states(streams)
        record["eval/seconds"] = time.perf_counter() - start
        self.log(f"step {step} downstream eval ({record['eval/seconds']:.1f} s): " + ", ".join(
            f"{k[5:]} {v:.4g}" for k, v in record.items() if k != "eval/seconds" and self._primary(k)))
        return record

    def _model_lm(self, model):
        """The evaluator over the training model's chunks (a ParallelLM); the tokenizer is read once."""
        if self.lm is None:
            from trident.evaluate.parallel_lm import ParallelLM
            from trident.data.tokenizer import Tokenizer

            tokenizer = Tokenizer.load(self.tokenizer_source)
            self.lm = ParallelLM(model, tokenizer, batch_size=self.settings.batch_size,
                                 info={"kind": "trident", "name": "in-training"})
            self.lm.progress = False
        self.lm.model = model.eval()
        return self.lm

    def _score(self, lm) -> dict:
        from trident.evaluate.harness import score_cell

        record = {}
        for name, (task, docs, pool) in self.loaded.items():
            source = str(task.root(self.data_path)) if self.data_path is not None else f"hub:{task.hub}"
            for k in self.cells[name]:
                entry, _ = score_cell(lm, task, k, docs, pool, [self.settings.seed], source, CONSTRUCTION, None, None)
                record |= {metric_key(name, k, metric): value for metric, value in entry["metrics"].items()}
        return record

    def _primary(self, key: str) -> bool:
        task = key.split("/")[1]
        return task in self.loaded and key.endswith("/" + self.loaded[task][0].primary_metric)
