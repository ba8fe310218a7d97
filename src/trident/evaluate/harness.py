"""Run tasks x shot counts against one model and collect results.json.

`run_evaluation` is the library entry point (`trident eval` and `trident demo` call it): for each
task it loads the scored split and the few-shot pool once, then for each shot count builds every
document's prompts, scores all requests in one batched pass, and averages per-example metrics.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import trident
from trident.evaluate import fewshot
from trident.evaluate.lm import LM
from trident.evaluate.results import write_results
from trident.tasks import Task, expand, get_task
from trident.text.storage import location, make_folder

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
    scores = lm.loglikelihood_detailed(prompts, desc=f"{task.name} {shots}-shot")
    per_example, samples = [], []
    for doc_index, (doc, (lo, hi)) in enumerate(zip(eval_docs, owners)):
        metrics = task.score(doc, scores[lo:hi])
        per_example.append(metrics)
        samples.append({
            "doc_index": doc_index, "fewshot_indices": fewshot_ids[doc_index], "gold": task.doc_to_gold(doc),
            "requests": prompts[lo:hi], "logprobs": [s.logprob for s in scores[lo:hi]],
            "is_greedy": [s.is_greedy for s in scores[lo:hi]], "num_tokens": [s.num_tokens for s in scores[lo:hi]],
            "metrics": metrics, **task.groups(doc),
        })
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
    return entry, samples, per_example


def run_evaluation(lm: LM, tasks: list[str], shots: list[int], data_dir: str | Path | None,
                   out_dir: str | Path | None, seed: int = 1234, batch_size: int | None = None,
                   limit: int | None = None, log_samples: bool = False, bias: bool = False,
                   progress: bool = True, contamination_corpus: list[str | Path] | None = None,
                   contamination_ngram: int = 13, fewshot_construction: str = "harness") -> dict:
    """Evaluate `lm` on each task at each shot count; write OUT/results.json (when out_dir) and return it.

    data_dir None reads the tasks from the Hugging Face hub (needs `datasets` and network).
    limit keeps the first N scored documents of each task. With log_samples, one JSONL per task and
    shot count goes to OUT/samples/. With bias, the bias probes run too (results["bias"]). With
    contamination_corpus (training JSONL files), each entry also gets a "contamination" report:
    the fraction of examples sharing an n-gram with the corpus and the metrics on the clean rest.
    fewshot_construction: "harness" or "per-document" (evaluate/fewshot.py).
    """
    _check_arguments(shots, fewshot_construction)
    lm.batch_size = lm.batch_size if batch_size is None else batch_size
    if hasattr(lm, "progress"):
        lm.progress = progress
    out = location(out_dir) if out_dir is not None else None
    data_path = location(data_dir) if data_dir is not None else None
    results: dict = {
        "trident_version": trident.__version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": lm.describe(),
        "seed": seed,
        "limit": limit,
        "batch_size": lm.batch_size,
        "prompt_convention": PROMPT_CONVENTION,
        "fewshot_construction": fewshot_construction,
        "results": {},
    }
    loaded = _load_tasks(tasks, shots, data_path, limit)
    dirty, contamination_stats = {}, None
    if contamination_corpus:
        from trident.evaluate.contamination import example_text, find_dirty

        texts = {name: [example_text(task, d) for d in docs] for name, (task, docs, _) in loaded.items()}
        dirty, contamination_stats = find_dirty(texts, [Path(p) for p in contamination_corpus], contamination_ngram)
        results["contamination"] = contamination_stats
    for name, (task, docs, pool) in loaded.items():
        source = str(task.root(data_path)) if data_path is not None else f"hub:{task.hub}"
        results["results"][name] = {}
        for k in shots:
            entry, samples, per_example = evaluate_task(lm, task, k, docs, pool, seed, source, fewshot_construction)
            if name in dirty:
                from trident.evaluate.contamination import clean_report

                entry["contamination"] = clean_report(task, per_example, dirty[name], contamination_stats)
                for sample, flag in zip(samples, dirty[name]):
                    sample["dirty"] = flag
            results["results"][name][str(k)] = entry
            if log_samples and out is not None:
                _write_samples(out / "samples" / f"{name}_{k}shot.jsonl", samples)
    if bias:
        from trident.evaluate.bias import run_bias_probes

        results["bias"] = run_bias_probes(lm, data_dir=data_path, seed=seed)
    if out is not None:
        write_results(results, out)
    return results


def _check_arguments(shots: list[int], construction: str) -> None:
    if any(k < 0 for k in shots):
        raise ValueError(f"shot counts must be >= 0, got {shots}")
    if construction not in fewshot.FEWSHOT_CONSTRUCTIONS:
        raise ValueError(f"unknown few-shot construction {construction!r}; known: {', '.join(fewshot.FEWSHOT_CONSTRUCTIONS)}")


def _load_tasks(tasks: list[str], shots: list[int], data_path: Path | None, limit: int | None) -> dict:
    """name -> (task, scored docs, few-shot pool), all loaded before any scoring, so a data error
    stops the run before the model has done any work."""
    loaded = {}
    for name in expand(tasks):
        task = get_task(name)
        all_docs = task.load(data_path, task.eval_split)
        needs_pool = max(shots, default=0) > 0
        # the pool is the whole split even under --limit (scored docs are its first N, same indices)
        pool = fewshot.load_pool(task, data_path, all_docs) if needs_pool else fewshot.FewShotPool("", [], False)
        loaded[name] = (task, all_docs[:limit], pool)
    return loaded


def _write_samples(path: Path, samples: list[dict]) -> None:
    make_folder(path.parent)
    with path.open("w", encoding="utf-8") as handle:
        for sample in samples:
            handle.write(json.dumps(sample, ensure_ascii=False) + "\n")
