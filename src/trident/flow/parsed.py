"""A parsed flow file (its sources and sections) and the flow's errors: what the checks, the stages
and the loader (spec.py) share."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trident.config import ConfigError
from trident.config.flow import (CurateSection, EvalSection, GenerateSection, SampleSection, SourceCurate,
                                 TokenizerSection, TrainSection)


class FlowError(ValueError):
    """A flow that cannot run: a stage's failure, or (FlowConfigError) a mistake in the flow file."""


class StageRefused(FlowError, ConfigError):
    """A stage's command refused its input at start (its exit 2, its line said why): `trident run` exits 2
    too, as every command does for the same mistake."""


class FlowConfigError(FlowError, ConfigError):
    """A mistake in the flow file itself (unknown key, wrong value, a glob that matches no file): `trident run`
    exits 2."""


@dataclass
class Source:
    """One input of the blend. `files` are the user's; a source with `generate` has none until its
    inputs stage writes them under OUT/inputs/. `curate` holds the source's own curation settings
    (over the flow's: Flow.curate_of); `decontaminate` adds decontamination against the flow's
    evaluation files."""
    name: str
    files: list[Path]
    weight: float
    generate: GenerateSection | None
    curate: SourceCurate
    decontaminate: bool


@dataclass
class Flow:
    """A parsed flow file; relative paths are resolved against the flow file's folder."""
    sources: list[Source]
    curate: CurateSection
    tokenizer: TokenizerSection
    train: TrainSection
    eval: EvalSection
    sample: SampleSection

    def curate_of(self, source: Source) -> CurateSection:
        return source.curate.over(self.curate)
