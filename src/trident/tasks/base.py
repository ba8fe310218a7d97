"""What a task is: published files -> documents -> prompts -> log-likelihood requests -> metrics.

A task turns one document into requests (context, continuation) for the model, and the model's
scores back into per-example metric values; the harness averages those. Prompt formats follow
lm-evaluation-harness: target delimiter " ", few-shot examples joined by "\n\n".
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from trident.tasks.files import TaskDataError
from trident.tasks.metrics import argmax, mean, mean_stderr
from trident.tasks.types import Loglikelihood
from trident.text.storage import location


class Task(ABC):
    """One benchmark. Subclasses set the class attributes and the document methods."""

    name: str = ""
    version: str = "1"  # prompt-format version, bumped whenever a prompt or a metric changes
    folder: str = ""  # sub-folder of --data-dir holding the published files
    eval_split: str = "validation"
    fewshot_splits: tuple[str, ...] = ("train", "validation")
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n\n"
    expected: str = ""  # the published files, for error messages and docs
    hub: tuple[str, str | None] | None = None  # (dataset path, config) on the Hugging Face hub
    hub_splits: dict[str, str] = {}
    hub_revision: str | None = None  # a branch of the hub repository, e.g. its script-free parquet conversion
    output_type: str = "loglikelihood"  # or "generate_until" (tasks/generation.py)
    metric_names: tuple[str, ...] = ("acc",)
    primary_metric: str = "acc"
    # lm-evaluation-harness hands its few-shot sampler the scored document (which is then never its own
    # example) only when the task's harness config has no test_split; tasks with one set this False
    harness_excludes_scored_doc: bool = True

    # ---- data -------------------------------------------------------------------------------
    def root(self, data_dir: Path) -> Path:
        """data_dir/folder when that exists, else data_dir itself (files dropped straight in)."""
        nested = location(data_dir) / self.folder
        return nested if self.folder and nested.is_dir() else location(data_dir)

    @abstractmethod
    def split_files(self, split: str) -> list[str] | None:
        """Files (relative to root) holding `split`, or None when the task has no such split."""

    @abstractmethod
    def read_split(self, root: Path, split: str) -> list[dict]:
        """Documents of `split`, parsed from the published files under root."""

    def has_split(self, data_dir: Path | None, split: str) -> bool:
        """Whether `split` can be loaded: its files are under data_dir, or (data_dir None) the hub offers it."""
        if data_dir is None:
            return self.hub is not None and split in self.hub_splits
        files = self.split_files(split)
        return bool(files) and all((self.root(data_dir) / f).exists() for f in files)

    def load(self, data_dir: Path | None, split: str) -> list[dict]:
        """Documents of `split` from data_dir, or from the Hugging Face hub when data_dir is None."""
        if self.split_files(split) is None:
            raise TaskDataError(f"{self.name}: has no {split!r} split")
        if data_dir is None:
            from trident.tasks.hub import load_from_hub

            return [self.from_hub(row) for row in load_from_hub(self, split)]
        return self.read_split(self.root(data_dir), split)

    def from_hub(self, row: dict) -> dict:
        """A hub row converted to this task's document form (same keys as the local reader)."""
        raise TaskDataError(f"{self.name}: loading from the Hugging Face hub is not supported; use --data-dir")

    # ---- prompts ----------------------------------------------------------------------------
    @abstractmethod
    def doc_to_text(self, doc: dict) -> str:
        """The prompt for one document, without few-shot examples."""

    @abstractmethod
    def doc_to_choices(self, doc: dict) -> list[str]:
        """The candidate continuations (without the target delimiter)."""

    @abstractmethod
    def doc_to_gold(self, doc: dict) -> int:
        """Index of the correct choice."""

    def fewshot_example(self, doc: dict) -> str:
        """A solved example as shown in a few-shot prompt: prompt + delimiter + gold answer."""
        return self.doc_to_text(doc) + self.target_delimiter + self.doc_to_choices(doc)[self.doc_to_gold(doc)]

    def harness_shot(self, doc: dict) -> str:
        """A solved example as lm-evaluation-harness writes it: its doc_to_text + target delimiter +
        doc_to_target; equal to fewshot_example except where a task says otherwise (LAMBADA)."""
        return self.fewshot_example(doc)

    def requests(self, doc: dict, prefix: str) -> list[tuple[str, str]]:
        """(context, continuation) pairs to score; prefix holds the few-shot examples and delimiter."""
        context = prefix + self.doc_to_text(doc)
        return [(context, self.target_delimiter + choice) for choice in self.doc_to_choices(doc)]

    # ---- metrics ----------------------------------------------------------------------------
    @abstractmethod
    def score(self, doc: dict, results: list[Loglikelihood]) -> dict[str, float]:
        """Per-example metric values from the scores of this document's requests."""

    def aggregate(self, per_example: list[dict[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
        """(metric -> value, metric -> standard error) over examples; default: mean and its stderr.

        Metrics absent from some examples (e.g. per-heuristic accuracies) average over those present.
        """
        names = list(dict.fromkeys(k for example in per_example for k in example))
        values, errors = {}, {}
        for name in names:
            column = [example[name] for example in per_example if name in example]
            values[name], errors[name] = mean(column), mean_stderr(column)
        return values, errors

    def groups(self, doc: dict) -> dict:
        """Extra fields kept in per-example logs (e.g. HANS heuristic)."""
        return {}


class MultipleChoiceTask(Task):
    """Argmax of summed log-likelihood over choices; also length-normalised variants.

    acc_norm divides each choice's log-likelihood by its length in characters (lm-evaluation-
    harness); acc_norm_token divides by its length in tokens (GPT-3's normalisation).
    """

    metric_names = ("acc", "acc_norm", "acc_norm_token")

    def score(self, doc: dict, results: list[Loglikelihood]) -> dict[str, float]:
        choices = self.doc_to_choices(doc)
        gold = self.doc_to_gold(doc)
        logprobs = [r.logprob for r in results]
        per_char = [lp / max(1, len(c)) for lp, c in zip(logprobs, choices)]
        per_token = [r.logprob / r.num_tokens for r in results]
        return {
            "acc": float(argmax(logprobs) == gold),
            "acc_norm": float(argmax(per_char) == gold),
            "acc_norm_token": float(argmax(per_token) == gold),
        }


def label_index(value, labels: dict, task: str, where: str) -> int:
    """Map a published label to the choice index, raising TaskDataError on an unknown label."""
    if value not in labels:
        raise TaskDataError(f"{task}: {where}: unknown label {value!r}; expected one of {sorted(map(str, labels))}")
    return labels[value]
