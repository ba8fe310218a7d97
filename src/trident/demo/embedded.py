"""`trident demo`: the whole flow on text every Python installation ships (stdlib docstrings).

corpus (+ held-out split) -> curate a synthetic Common Crawl WARC -> tokenizer -> indexed datasets
-> train on a blend (configs/demo.yaml) -> sample -> evaluate on held-out tasks -> report.md + PNGs.
No input from the user, nothing downloaded. Each stage prints what it did; the report links it all.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from trident.config import load_config
from trident.demo.report import plot_loss, write_report


def _stage(title: str) -> None:
    print(f"\n== {title} ==", flush=True)


def build_corpus(out: Path, max_docs: int | None) -> tuple[Path, list[str]]:
    """The stdlib corpus, minus every 20th document, which is held out for evaluation."""
    from trident.data.stdlib_corpus import build_stdlib_corpus

    everything = out / "corpus" / "stdlib-all.jsonl"
    everything.parent.mkdir(parents=True, exist_ok=True)
    count = build_stdlib_corpus(everything, max_docs=max_docs)
    lines = everything.read_text(encoding="utf-8").splitlines()
    train = out / "corpus" / "stdlib.jsonl"
    train.write_text("".join(line + "\n" for i, line in enumerate(lines) if i % 20 != 19), encoding="utf-8")
    heldout = [json.loads(line)["text"] for i, line in enumerate(lines) if i % 20 == 19]
    print(f"{count} documents ({everything.stat().st_size / 1e6:.1f} MB) from the Python standard library's "
          f"docstrings; {len(heldout)} held out for evaluation")
    return train, heldout


def curate_web_sample(out: Path, eval_dir: Path) -> tuple[dict, Path]:
    """A synthetic Common Crawl WARC (boilerplate, other languages, duplicates, non-HTML, 404s)
    through the MT-NLG curation pipeline, decontaminated against the demo's evaluation tasks."""
    from trident.curate.pipeline import run_pipeline
    from trident.curate.samples import write_sample_warc

    warc = out / "raw" / "crawl-sample.warc.gz"
    kinds = write_sample_warc(warc, n_docs=120, seed=0)
    print(f"wrote {warc}: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())))
    tasks = "{lambada: " + str(eval_dir / "lambada" / "lambada_test.jsonl") + "}"
    stats = run_pipeline("curate-cc", [warc], out / "curated", workers=2,
                         overrides=["stages.min_length.min_tokens=64", "stages.decontaminate.enabled=true",
                                    f"stages.decontaminate.tasks={tasks}", "progress=false"])
    documents = stats["output"]["documents"]
    print(f"curated: {stats['stages'][0]['counters'].get('in', 0)} records in, {documents} documents kept "
          f"-> {out / 'curated'} (funnel in curated/report.md)")
    return stats, out / "curated"


def evaluate_model(model, tokenizer, config, eval_dir: Path, out: Path) -> dict:
    from trident.evaluate.harness import run_evaluation
    from trident.evaluate.lm import trident_lm

    lm = trident_lm(model.eval(), tokenizer, config.model.seq_length, batch_size=16)
    return run_evaluation(lm, ["lambada", "hellaswag"], [0, 1], eval_dir, out, progress=False)


def eval_table(trained: dict, untrained: dict) -> str:
    """Trained beside untrained, per task, metric and shot count."""
    lines = ["| task | metric | n | untrained 0-shot | trained 0-shot | trained 1-shot |", "|---|---|---|---|---|---|"]
    for task, per_shot in trained["results"].items():
        first = per_shot["0"]
        for metric in first["metrics"]:
            before = untrained["results"][task]["0"]["metrics"][metric]
            cells = [before, first["metrics"][metric], per_shot["1"]["metrics"][metric]]
            lines.append(f"| {task} | {metric} | {first['n']} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    return "\n".join(lines)


def run_demo(out: Path, steps: int | None = None, max_docs: int | None = None, overrides: list[str] = ()) -> dict:
    from trident.data.build import tokenize_files
    from trident.data.tokenizer import train_tokenizer
    from trident.evaluate.heldout import write_heldout_tasks
    from trident.infer.generate import generate
    from trident.model.gpt import count_parameters
    from trident.train.metrics import read_metrics
    from trident.train.trainer import Trainer

    out.mkdir(parents=True, exist_ok=True)
    _stage("1. corpus")
    corpus, heldout = build_corpus(out, max_docs)
    eval_dir = out / "eval_data"
    write_heldout_tasks(heldout, eval_dir, n_examples=64, seed=0)
    _stage("2. curate (Common Crawl sample)")
    curation, curated = curate_web_sample(out, eval_dir)
    web = sorted(curated.glob("*.jsonl.zst"))
    _stage("3. tokenizer")
    tokenizer = train_tokenizer([corpus, *web], vocab_size=2048, out=out / "tokenizer.json")
    print(f"byte-level BPE, {tokenizer.vocab_size} tokens -> {out / 'tokenizer.json'}")
    _stage("4. tokenize")
    stats = tokenize_files([corpus], out / "data" / "stdlib", out / "tokenizer.json", workers=2, progress=False)
    web_stats = tokenize_files(web, out / "data" / "web", out / "tokenizer.json", workers=1, progress=False)
    print(f"stdlib: {stats['documents']} documents, {stats['tokens']:,} tokens; curated web: "
          f"{web_stats['documents']} documents, {web_stats['tokens']:,} tokens -> {out / 'data'}")
    _stage("5. train (blend: 85% stdlib, 15% curated web)")
    paths = f"data.paths=[0.85,{out / 'data' / 'stdlib'},0.15,{out / 'data' / 'web'}]"
    config = load_config("demo", [paths, f"data.tokenizer={out / 'tokenizer.json'}",
                                  *([f"train.steps={steps}"] if steps else []), *overrides])
    trainer = Trainer(config, out / "train")
    untrained = evaluate_model(trainer.model.chunks[0], tokenizer, config, eval_dir, out / "eval-untrained")
    start = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - start
    metrics = read_metrics(out / "train" / "metrics.jsonl")
    _stage("6. generate")
    prompt = "def read_file(path):\n    \"\"\"Return the"
    model = trainer.model.chunks[0].eval()
    sample = generate(model, tokenizer, prompt, max_new_tokens=60, temperature=0.8, top_k=40, seed=0)
    print(prompt + sample)
    _stage("7. evaluate (held-out documents, LAMBADA and HellaSwag formats)")
    results = evaluate_model(model, tokenizer, config, eval_dir, out / "eval")
    table = eval_table(results, untrained)
    print(table)
    val = [m["val_loss"] for m in metrics if m.get("val_loss") is not None]
    funnel = (f"{curation['stages'][0]['counters'].get('in', 0)} WARC records -> "
              f"{curation['output']['documents']} documents; per-stage counts and the funnel chart in "
              f"[curated/report.md](curated/report.md).")
    summary = {"documents": stats["documents"], "tokens": stats["tokens"] + web_stats["tokens"],
               "vocab_size": tokenizer.vocab_size, "parameters": count_parameters(model), "config": "demo",
               "metrics": metrics, "train_seconds": train_seconds, "val_loss": val[-1] if val else None,
               "prompt": prompt, "sample": prompt + sample,
               "sections": {"Curation": funnel,
                            "Evaluation (held-out text; chance: 25% on the 4-way task)": table}}
    _stage("8. report")
    plot_loss(metrics, out / "loss.png")
    report = write_report(out, summary)
    print(f"loss {metrics[0]['loss']:.3f} -> {metrics[-1]['loss']:.3f} over {len(metrics)} steps; report: {report}")
    (out / "summary.json").write_text(json.dumps({k: v for k, v in summary.items() if k != "metrics"}, indent=1))
    return summary
