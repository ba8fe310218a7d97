"""Inputs a flow makes itself: the sources with `generate:` and the held-out evaluation tasks.

- stdlib-docstrings: the docstrings of the running Python's standard library as JSONL (no download);
  with holdout_every N, every Nth document goes to OUT/inputs/NAME.heldout.jsonl instead, never trained on.
- sample-warc: a synthetic Common Crawl WARC (articles with boilerplate, other languages, duplicates,
  non-HTML, 404s) for the curation pipeline.
`heldout` turns a source's held-out documents (written by its generator, or kept out of its curation by
the holdout stage: any source) into LAMBADA- and HellaSwag-format task files, and writes the documents
themselves for heldout_clean.py to decontaminate every source against.
"""
from __future__ import annotations

import json
from pathlib import Path

from trident.flow.spec import Flow, FlowError, Source


def generated_file(out: Path, source: Source) -> Path:
    suffix = ".warc.gz" if source.generate.kind == "sample-warc" else ".jsonl"
    return out / "inputs" / f"{source.name}{suffix}"


def heldout_file(out: Path, source: Source) -> Path:
    return out / "inputs" / f"{source.name}.heldout.jsonl"


def generate(out: Path, source: Source) -> None:
    """Write the source's input file (and its held-out documents) under OUT/inputs/."""
    target = generated_file(out, source)
    target.parent.mkdir(parents=True, exist_ok=True)
    settings = source.generate
    if settings.kind == "sample-warc":
        from trident.curate.samples.crawl import write_sample_warc

        kinds = write_sample_warc(target, n_docs=settings.n_docs, seed=settings.seed)
        print(f"wrote {target}: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())))
        return
    from trident.data.stdlib_corpus import build_stdlib_corpus

    everything = target.with_suffix(".all.jsonl")
    count = build_stdlib_corpus(everything, max_docs=settings.max_docs)
    every = settings.holdout_every
    lines = everything.read_text(encoding="utf-8").splitlines()
    held = [line for i, line in enumerate(lines) if every and i % every == every - 1]
    target.write_text("".join(line + "\n" for i, line in enumerate(lines)
                              if not (every and i % every == every - 1)), encoding="utf-8")
    heldout_file(out, source).write_text("".join(line + "\n" for line in held), encoding="utf-8")
    everything.unlink()
    print(f"{count} documents from the Python standard library's docstrings -> {target}; "
          f"{len(held)} held out for evaluation")


def heldout(flow: Flow, out: Path) -> None:
    """OUT/eval_data/: task files in the published formats, built from the held-out documents: those
    a stdlib-docstrings source wrote itself, or those curation's holdout stage kept out of a source."""
    from trident.curate.filters.holdout import held_out_texts
    from trident.evaluate.heldout import write_heldout_tasks
    from trident.flow.checks import heldout_source, holds_out_itself
    from trident.flow.heldout_clean import write_documents

    settings, source = flow.eval.heldout, heldout_source(flow)
    if holds_out_itself(source):
        lines = heldout_file(out, source).read_text(encoding="utf-8").splitlines()
        texts = [json.loads(line)["text"] for line in lines]
    else:
        texts = held_out_texts(out / "curated" / source.name)
    try:
        counts = write_heldout_tasks(texts, eval_data(flow, out), n_examples=settings.n_examples, seed=settings.seed)
    except ValueError as error:  # too few or too short documents held out
        raise FlowError(f"eval.heldout: {len(texts)} documents held out of source {source.name!r}: {error}; "
                        f"hold out more (a smaller eval.heldout.every) or use eval.data_dir") from None
    print(f"held-out tasks from {len(texts)} documents of {source.name}: {counts} -> {eval_data(flow, out)}")
    print(f"held-out documents, which every source is decontaminated against -> {write_documents(out, texts)}")


def eval_data(flow: Flow, out: Path) -> Path | None:
    """The folder of evaluation files: the flow's data_dir, or the held-out tasks it builds."""
    if flow.eval.heldout:
        return out / "eval_data"
    return Path(flow.eval.data_dir) if flow.eval.data_dir else None
