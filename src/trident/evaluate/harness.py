"""Run tasks x shot counts against one model and collect results.json.

`run_evaluation` is the library entry point (`trident eval` and `trident demo` call it): it first
loads every task's scored split and few-shot pool and checks every task/shot cell (preflight.py),
then for each cell builds every document's prompts, scores all requests in one batched pass,
averages per-example metrics, and records the finished cell (resume.py).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Callable

import trident
from trident.evaluate import fewshot, resume
from trident.evaluate.lm import LM
from trident.evaluate.preflight import PreflightError, load_checked, plan_cells
from trident.evaluate.protocols import describe as describe_protocol
from trident.evaluate.protocols import paper_rows
from trident.evaluate.results import write_results
from trident.evaluate.spread import draw_seeds, spread
from trident.tasks import Task
from trident.text.storage import is_remote, location, make_folder

PROMPT_CONVENTION = "lm-evaluation-harness v0.4 prompts; target delimiter per task, few-shot delimiter '\\n\\n'"


def build_prompts(task: Task, shots: int, eval_docs: list[dict], pool: fewshot.FewShotPool, seed: int,
                  construction: str = "harness") -> tuple[list[tuple[str, str]], list[tuple[int, int]], list[list[int]]]:
    """(every request in document order, each document's [lo, hi) slice of them, its few-shot indices)."""
    prompts, owners = [], []
    fewshot_ids = fewshot.all_indices(task, pool, shots, seed, eval_docs, construction)
    for doc, indices in zip(eval_docs, fewshot_ids):
        requests = task.requests(doc, fewshot.prefix(task, pool, indices, construction))
        prompts.extend(requests)
        owners.append((len(prompts) - len(requests), len(prompts)))
    return prompts, owners, fewshot_ids


def evaluate_task(lm: LM, task: Task, shots: int, eval_docs: list[dict], pool: fewshot.FewShotPool,
                  seed: int, data_source: str, construction: str = "harness") -> tuple[dict, list[dict], list[dict[str, float]]]:
    """(results entry, per-example log records, per-example metrics) of one task at one shot count."""
    prompts, owners, fewshot_ids = build_prompts(task, shots, eval_docs, pool, seed, construction)
    score = _score_generations if task.output_type == "generate_until" else _score_loglikelihoods
    per_example, samples = [], []
    for doc_index, (doc, metrics, logged) in enumerate(score(lm, task, shots, eval_docs, prompts, owners)):
        per_example.append(metrics)
        samples.append({"doc_index": doc_index, "fewshot_indices": fewshot_ids[doc_index],
                        "gold": task.doc_to_gold(doc), **logged, "metrics": metrics, **task.groups(doc)})
    values, errors = task.aggregate(per_example)
    entry = {
        "metrics": values,
        "stderr": errors,
        "n": len(eval_docs),
        "primary_metric": task.primary_metric,
        "prompt_version": task.version,
        "eval_split": task.eval_split,
        "data": data_source,
        "requests": len(prompts),
        "fewshot": {
            "k": shots,
            "source_split": pool.split if shots else None,
            "delimiter": task.fewshot_delimiter,
            "target_delimiter": task.target_delimiter,
            "construction": construction,
            "order": fewshot.describe(task, pool, seed, construction),
            "seed": seed,
        },
    }
    if task.output_type == "generate_until":
        entry["generation"] = {"greedy": True, "until": list(task.until), "max_new_tokens": task.max_new_tokens}
    return entry, samples, per_example


def _score_loglikelihoods(lm: LM, task: Task, shots: int, docs: list[dict], prompts: list[tuple[str, str]],
                          owners: list[tuple[int, int]]):
    """(document, metrics, what its log records) per document, from one batched scoring pass."""
    scores = lm.loglikelihood_detailed(prompts, desc=f"{task.name} {shots}-shot")
    for doc, (lo, hi) in zip(docs, owners):
        mine = scores[lo:hi]
        yield doc, task.score(doc, mine), {
            "requests": prompts[lo:hi], "logprobs": [s.logprob for s in mine],
            "is_greedy": [s.is_greedy for s in mine], "num_tokens": [s.num_tokens for s in mine]}


def _score_generations(lm: LM, task: Task, shots: int, docs: list[dict], prompts: list[tuple[str, str]],
                       owners: list[tuple[int, int]]):
    """As _score_loglikelihoods for a generation task: one greedy generation per document."""
    texts = lm.generate_until([context for context, _ in prompts], task.until, task.max_new_tokens)
    for doc, (lo, _), text in zip(docs, owners, texts):
        yield doc, task.score_generation(doc, text), {
            "requests": prompts[lo:lo + 1], "generation": text, "answer": task.extract(text),
            "targets": task.doc_to_targets(doc)}


def run_evaluation(lm: LM | Callable[[], LM], tasks: list[str] | None, shots: list[int] | dict[str, list[int]] | None,
                   data_dir: str | Path | None, out_dir: str | Path | None, seed: int = 1234,
                   batch_size: int | None = None, limit: int | None = None, log_samples: bool = False,
                   bias: bool = False, progress: bool = True, contamination_corpus: list[str | Path] | None = None,
                   contamination_ngram: int = 13, fewshot_construction: str = "harness", fewshot_seeds: int = 1,
                   protocol: str | None = None, resume_from: str | Path | None = None, bias_settings=None) -> dict:
    """Evaluate `lm` on each task at each shot count; write OUT/results.json (when out_dir) and return it.

    lm may be a callable returning the LM: it is called only after every task/shot cell has been
    checked (preflight.load_checked), so a missing file or a too small few-shot pool fails with a
    PreflightError before a large model loads. shots: one list for every task, or task -> list;
    protocol (e.g. "mtnlg", evaluate/protocols.py) instead fixes tasks and shots (pass None for both).
    data_dir None reads the tasks from the Hugging Face hub (needs `datasets` and network).
    limit keeps the first N scored documents of each task. With log_samples, one JSONL per task and
    shot count goes to OUT/samples/. With bias, the bias probes run too (results["bias"]), sampled as
    bias_settings says (evaluate/cooccurrence.SamplingSettings; default the papers'). With
    contamination_corpus (training JSONL files), each entry also gets a "contamination" report.
    fewshot_construction: "harness" or "per-document" (evaluate/fewshot.py). fewshot_seeds S > 1
    scores each few-shot cell with S draws and adds "fewshot_spread" (evaluate/spread.py).
    resume_from: a folder whose results.json is a partial run of the same settings; its finished
    cells are reused (evaluate/resume.py). Pass it on every rank of a parallel evaluation.
    """
    cells = plan_cells(tasks, shots, protocol)
    seeds = draw_seeds(seed, fewshot_seeds)
    data_path = location(data_dir) if data_dir is not None else None
    loaded = load_checked(cells, data_path, limit, fewshot_construction)
    dirty, contamination = _contamination(loaded, contamination_corpus, contamination_ngram)
    bias_settings = _checked_bias_settings(bias_settings) if bias else None
    earlier = resume.read_results(resume_from)  # before the model loads: loading syncs the ranks
    lm = _ready(lm, batch_size, progress)
    results = _header(lm, seed, limit, fewshot_construction, seeds, protocol)
    if contamination is not None:
        results["contamination"] = contamination
    sources = {name: str(task.root(data_path)) if data_path is not None else f"hub:{task.hub}"
               for name, (task, _, _) in loaded.items()}
    finished = {}
    if resume.is_partial(earlier):
        finished = resume.finished_cells(earlier, results, cells, sources, str(resume_from))
        results["resumed"] = {"from": earlier.get("created"), "cells": [f"{n} {k}-shot" for n, k in finished]}
    out = location(out_dir) if out_dir is not None else None
    for name, (task, docs, pool) in loaded.items():
        for k in cells[name]:
            if (name, k) in finished:
                results["results"].setdefault(name, {})[str(k)] = finished[name, k]
                continue
            entry, samples = score_cell(lm, task, k, docs, pool, seeds, sources[name], fewshot_construction,
                                        dirty.get(name), contamination)
            results["results"].setdefault(name, {})[str(k)] = entry
            if out is not None:
                _record_cell(out, results, samples if log_samples else {}, name, k, seed)
    if bias:
        from trident.evaluate.bias import run_bias_probes

        results["bias"] = run_bias_probes(lm, data_dir=data_path, seed=seed, settings=bias_settings)
    if protocol is not None:
        results["protocol"]["rows"] = paper_rows(protocol, results)
    results["partial"] = False
    if out is not None:
        write_results(results, out)
    return results


def score_cell(lm: LM, task: Task, k: int, docs: list[dict], pool: fewshot.FewShotPool, seeds: list[int],
               source: str, construction: str, dirty: list[bool] | None,
               contamination_stats: dict | None) -> tuple[dict, dict[int, list[dict]]]:
    """(results entry, seed -> per-example log) of one task at k shots, drawn with each seed.

    The entry is the first seed's (a plain run's), plus "fewshot_spread" when there are several
    draws; zero-shot prompts do not depend on the seed, so they are scored once."""
    draws = seeds if k > 0 else seeds[:1]
    scored = [evaluate_task(lm, task, k, docs, pool, s, source, construction) for s in draws]
    entry, _, per_example = scored[0]
    if len(draws) > 1:
        entry["fewshot_spread"] = spread(draws, [e["metrics"] for e, _, _ in scored], [p for _, _, p in scored])
    if dirty is not None:
        from trident.evaluate.contamination import clean_report

        entry["contamination"] = clean_report(task, per_example, dirty, contamination_stats)
        for draw in scored:
            for sample, flag in zip(draw[1], dirty):
                sample["dirty"] = flag
    return entry, {s: samples for s, (_, samples, _) in zip(draws, scored)}


def _checked_bias_settings(settings):
    """The bias probes' sampling settings, checked (and the sentiment library found) before the model loads."""
    from trident.evaluate.cooccurrence import SamplingSettings, sentiment_scorer

    sentiment_scorer()
    return (settings or SamplingSettings()).check()


def _header(lm: LM, seed: int, limit: int | None, construction: str, seeds: list[int], protocol: str | None) -> dict:
    """results.json before any cell: provenance, and `"partial": true` until the run ends."""
    header = {
        "trident_version": trident.__version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": lm.describe(),
        "seed": seed,
        "fewshot_seeds": seeds,
        "limit": limit,
        "batch_size": lm.batch_size,
        "prompt_convention": PROMPT_CONVENTION,
        "fewshot_construction": construction,
        "partial": True,
        "results": {},
    }
    if protocol is not None:
        header["protocol"] = describe_protocol(protocol)
    return header


def _ready(lm: LM | Callable[[], LM], batch_size: int | None, progress: bool) -> LM:
    """The LM (loaded now when given as a loader), with the run's batch size and progress display."""
    lm = lm if isinstance(lm, LM) or not callable(lm) else lm()
    lm.batch_size = lm.batch_size if batch_size is None else batch_size
    if hasattr(lm, "progress"):
        lm.progress = progress
    return lm


def _contamination(loaded: dict, corpus: list[str | Path] | None,
                   ngram: int) -> tuple[dict[str, list[bool]], dict | None]:
    """(task -> dirty flag per scored example, scan statistics); run before the model loads."""
    if not corpus:
        return {}, None
    from trident.evaluate.contamination import example_text, find_dirty

    missing = [str(p) for p in corpus if not location(p).exists()]
    if missing:
        raise PreflightError(f"contamination corpus file(s) not found: {', '.join(missing)}")
    texts = {name: [example_text(task, d) for d in docs] for name, (task, docs, _) in loaded.items()}
    return find_dirty(texts, [location(p) for p in corpus], ngram)


def _record_cell(out: Path, results: dict, samples: dict[int, list[dict]], name: str, k: int, seed: int) -> None:
    """Samples first, then results.json (still partial): a recorded cell always has its samples."""
    for draw_seed, draw in samples.items():
        _write_samples(out / "samples" / _samples_name(name, k, draw_seed, seed), draw)
    write_results(results, out)


def _samples_name(name: str, k: int, draw_seed: int, seed: int) -> str:
    """<task>_<k>shot.jsonl for the plain run's draw; other draws add _seed<S>."""
    return f"{name}_{k}shot.jsonl" if draw_seed == seed else f"{name}_{k}shot_seed{draw_seed}.jsonl"


def _write_samples(path: Path, samples: list[dict]) -> None:
    """One JSON line per example, through a temporary file: never a half-written log."""
    text = "".join(json.dumps(sample, ensure_ascii=False) + "\n" for sample in samples)
    if is_remote(path):
        path.write_text(text, encoding="utf-8")
        return
    make_folder(path.parent)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
