"""A flow file (`trident run FLOW.yaml`), typed like the training config: sources, curate, tokenizer,
train, eval and sample sections. These dataclasses hold every key a flow file may have and its only
default; `trident run --help` lists them from here, and anything else is refused naming the key.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

from trident.config.typed import setting

NAME = "flow file"  # how messages name the keys of this file
GENERATORS = ("stdlib-docstrings", "sample-warc")  # inputs a flow can make itself (trident.flow.inputs)
FEWSHOT_CONSTRUCTIONS = ("harness", "per-document")  # trident eval --fewshot-construction
_positive = lambda v: v > 0  # noqa: E731
_non_negative = lambda v: v >= 0  # noqa: E731


@dataclass
class GenerateSection:
    """An input the flow writes itself under OUT/inputs/ (a source's `generate:`; a bare kind is short for it)."""
    kind: str = setting(f"one of {', '.join(GENERATORS)}", lambda v: v in GENERATORS, default="")
    n_docs: int = setting("a positive int", _positive, default=120)  # sample-warc: distinct articles
    seed: int = 0  # sample-warc
    holdout_every: int = setting("an int >= 0", _non_negative, default=0)  # stdlib-docstrings: every Nth held out
    max_docs: Optional[int] = None  # stdlib-docstrings: at most this many documents; null: all


@dataclass
class CurateSection:
    """How sources are curated: a pipeline preset, YAML file or inline pipeline, plus overrides."""
    config: Union[str, dict] = "curate-cc"
    overrides: list[str] = field(default_factory=list)  # key=value, as on `trident curate`'s command line
    workers: int = setting("an int >= 0 (0: one per core)", _non_negative, default=1)
    progress: bool = True


@dataclass
class SourceCurate:
    """A source's own curation settings: each one given replaces the flow's; overrides are added after it."""
    config: Union[str, dict, None] = None
    overrides: list[str] = field(default_factory=list)
    workers: Optional[int] = setting("an int >= 0 (0: one per core)", lambda v: v is None or v >= 0, default=None)
    progress: Optional[bool] = None

    def over(self, flow: CurateSection) -> CurateSection:
        """The flow's settings with this source's on top."""
        pick = lambda mine, theirs: theirs if mine is None else mine  # noqa: E731
        return CurateSection(pick(self.config, flow.config), [*flow.overrides, *self.overrides],
                             pick(self.workers, flow.workers), pick(self.progress, flow.progress))


@dataclass
class SourceSection:
    """One input of the blend: files (paths or globs, relative to the flow file) or a generated input."""
    name: str = ""  # "": source<index>
    paths: Union[str, list[str]] = field(default_factory=list)
    path: str = ""  # one file; the same as paths: [path]
    weight: float = setting("a number > 0", _positive, default=1.0)
    generate: Union[str, GenerateSection, None] = None
    curate: SourceCurate = field(default_factory=SourceCurate)
    decontaminate: bool = False  # remove 13-grams of the flow's evaluation files from this source


@dataclass
class TokenizerSection:
    path: str = ""  # a tokenizers JSON file to use; "": train byte-level BPE on the curated text
    vocab_size: int = setting("a positive int", _positive, default=2048)


@dataclass
class TrainSection:
    config: str = ""  # a training preset or YAML file; "": tiny, or with `from` continue
    # the flow file's `from`: a Hugging Face model folder or trident checkpoint to continue (docs/open-models.md)
    from_: str = ""
    overrides: list[str] = field(default_factory=list)  # key=value, as on `trident train`'s command line
    nproc: int = setting("a positive int", _positive, default=1)


@dataclass
class HeldoutSection:
    """Evaluation tasks (lambada, hellaswag formats) built from documents of a source held out of
    training: any source, about one document in `every` kept out at the end of its curation (after
    dedup); a stdlib-docstrings source with generate.holdout_every holds its own out (no `every`)."""
    source: str = ""
    every: Optional[int] = setting("null or an int >= 2", lambda v: v is None or v >= 2, default=None)
    n_examples: int = setting("a positive int", _positive, default=64)
    seed: int = 0


@dataclass
class EvalSection:
    """The trained model's evaluation; `tasks: []` (or `eval: none`) skips it. Without data_dir or heldout
    the tasks' data comes from the Hugging Face hub."""
    tasks: list[str] = field(default_factory=lambda: ["lambada"])
    shots: list[int] = field(default_factory=lambda: [0])
    data_dir: str = ""  # the tasks' files; or heldout, never both
    heldout: Optional[HeldoutSection] = None
    limit: Optional[int] = setting("null or an int >= 0", lambda v: v is None or v >= 0, default=None)  # 0, null: all
    batch_size: int = setting("a positive int", _positive, default=8)
    untrained: bool = False  # also score the initialised model, to show what training added
    fewshot_construction: str = setting(f"one of {', '.join(FEWSHOT_CONSTRUCTIONS)}",
                                        lambda v: v in FEWSHOT_CONSTRUCTIONS, default="harness")


@dataclass
class SampleSection:
    prompt: str = "The"
    max_new_tokens: int = setting("a positive int", _positive, default=60)
    seed: int = 0


@dataclass
class FlowConfig:
    sources: list[SourceSection] = field(default_factory=list)
    curate: CurateSection = field(default_factory=CurateSection)
    tokenizer: TokenizerSection = field(default_factory=TokenizerSection)
    train: TrainSection = field(default_factory=TrainSection)
    eval: EvalSection = field(default_factory=EvalSection)
    sample: SampleSection = field(default_factory=SampleSection)
