"""`holdout`: about one document in `every` kept out of the curated output, its text saved in its drop
record, so evaluation tasks can be built from text the model never trains on (`trident run`'s
`eval.heldout` over any source puts this stage at the end of its pipeline, after dedup)."""
from __future__ import annotations

from pathlib import Path

import xxhash

from trident.curate.document import Document
from trident.curate.droplog import SUFFIX, read_log
from trident.curate.stage import StreamingStage, register_stage

REASON = "held_out"


@register_stage("holdout")
class Holdout(StreamingStage):
    """Drops (reason `held_out`) the documents whose id hashes, with `seed`, to 0 modulo `every`: the
    choice depends on the document alone, never on how the inputs are sharded or how many workers
    run. Each drop record carries the document's `text` (held_out_texts reads them back)."""

    def __init__(self, every: int = 20, seed: int = 0) -> None:
        if every < 2:
            raise ValueError(f"every must be >= 2 (one document in every), got {every}")
        super().__init__(every=every, seed=seed)

    def apply(self, doc: Document) -> Document | str:
        chosen = xxhash.xxh64_intdigest(doc.id.encode("utf-8", "surrogatepass"), self.params["seed"])
        return REASON if chosen % self.params["every"] == 0 else doc

    def drop(self, doc: Document, reason: str) -> None:
        self.counters[f"dropped:{reason}"] += 1
        if self.drops is not None:
            self.drops.add(doc.id, str(doc.meta.get("url", "")), self.name, reason, text=doc.text)


def held_out_texts(curated: Path) -> list[str]:
    """The texts the holdout stage kept out of a curation run's output OUT (from OUT/drops/), in the
    order of the drop logs."""
    return [record["text"] for log in sorted(Path(curated, "drops").rglob(f"*{SUFFIX}"))
            for record in read_log(log) if record.get("stage") == "holdout" and "text" in record]
