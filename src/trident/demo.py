"""`trident demo`: the whole flow on a corpus every Python installation ships (stdlib docstrings).

corpus -> tokenizer -> indexed dataset -> train (configs/demo.yaml) -> sample -> report.md + PNG.
No input from the user, nothing downloaded. Each stage prints what it did; the report links it all.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from trident.config import load_config


def _stage(title: str) -> None:
    print(f"\n== {title} ==", flush=True)


def build_corpus(out: Path, max_docs: int | None) -> Path:
    from trident.data.stdlib_corpus import build_stdlib_corpus

    corpus = out / "corpus" / "stdlib.jsonl"
    corpus.parent.mkdir(parents=True, exist_ok=True)
    count = build_stdlib_corpus(corpus, max_docs=max_docs)
    print(f"{count} documents ({corpus.stat().st_size / 1e6:.1f} MB) from the Python standard library's docstrings")
    return corpus


def plot_loss(metrics: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([m["tokens"] for m in metrics], [m["loss"] for m in metrics], label="train loss", lw=1)
    val = [(m["tokens"], m["val_loss"]) for m in metrics if m.get("val_loss") is not None]
    if val:
        ax.plot(*zip(*val), "o-", label="validation loss")
    ax.set_xlabel("tokens")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title("trident demo: loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(out: Path, summary: dict) -> Path:
    m = summary["metrics"]
    lines = ["# trident demo report", "",
             f"Corpus: {summary['documents']} standard-library documents, {summary['tokens']:,} tokens "
             f"(tokenizer vocabulary {summary['vocab_size']}).", "",
             f"Model: {summary['parameters']:,} parameters, config `{summary['config']}`; "
             f"{len(m)} steps in {summary['train_seconds']:.0f} s.", "",
             "| | step | tokens | loss |", "|---|---|---|---|",
             f"| first | {m[0]['step']} | {m[0]['tokens']:,} | {m[0]['loss']:.3f} |",
             f"| last | {m[-1]['step']} | {m[-1]['tokens']:,} | {m[-1]['loss']:.3f} |", ""]
    if summary.get("val_loss") is not None:
        lines += [f"Validation loss at the end: {summary['val_loss']:.3f}.", ""]
    lines += ["![loss](loss.png)", "", "## Sample", "", f"Prompt: `{summary['prompt']}`", "", "```",
              summary["sample"], "```", ""]
    for title, section in summary.get("sections", {}).items():
        lines += [f"## {title}", "", section, ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def run_demo(out: Path, steps: int | None = None, max_docs: int | None = None, overrides: list[str] = ()) -> dict:
    from trident.data.build import tokenize_files
    from trident.data.tokenizer import train_tokenizer
    from trident.infer.generate import generate
    from trident.model.gpt import count_parameters
    from trident.train.metrics import read_metrics
    from trident.train.trainer import Trainer

    out.mkdir(parents=True, exist_ok=True)
    _stage("1. corpus")
    corpus = build_corpus(out, max_docs)
    _stage("2. tokenizer")
    tokenizer = train_tokenizer([corpus], vocab_size=2048, out=out / "tokenizer.json")
    print(f"byte-level BPE, {tokenizer.vocab_size} tokens -> {out / 'tokenizer.json'}")
    _stage("3. tokenize")
    stats = tokenize_files([corpus], out / "data" / "stdlib", out / "tokenizer.json", workers=2, progress=False)
    print(f"{stats['documents']} documents, {stats['tokens']:,} tokens -> {out / 'data' / 'stdlib'}.bin/.idx")
    _stage("4. train")
    config = load_config("demo", [f"data.paths=[{out / 'data' / 'stdlib'}]", f"data.tokenizer={out / 'tokenizer.json'}",
                                  *([f"train.steps={steps}"] if steps else []), *overrides])
    start = time.perf_counter()
    trainer = Trainer(config, out / "train")
    trainer.train()
    train_seconds = time.perf_counter() - start
    metrics = read_metrics(out / "train" / "metrics.jsonl")
    _stage("5. generate")
    prompt = "def read_file(path):\n    \"\"\"Return the"
    model = trainer.chunks[0].eval()
    sample = generate(model, tokenizer, prompt, max_new_tokens=60, temperature=0.8, top_k=40, seed=0)
    print(prompt + sample)
    val = [m["val_loss"] for m in metrics if m.get("val_loss") is not None]
    summary = {"documents": stats["documents"], "tokens": stats["tokens"], "vocab_size": tokenizer.vocab_size,
               "parameters": count_parameters(model), "config": "demo", "metrics": metrics,
               "train_seconds": train_seconds, "val_loss": val[-1] if val else None, "prompt": prompt,
               "sample": prompt + sample}
    _stage("6. report")
    plot_loss(metrics, out / "loss.png")
    report = write_report(out, summary)
    print(f"loss {metrics[0]['loss']:.3f} -> {metrics[-1]['loss']:.3f} over {len(metrics)} steps; report: {report}")
    (out / "summary.json").write_text(json.dumps({k: v for k, v in summary.items() if k != "metrics"}, indent=1))
    return summary
