"""Curation pipelines: a YAML list of stages, run shard by shard on a local or Ray executor.

Stage base classes and the registry live in trident.curate.stage and are re-exported here.
"""
from __future__ import annotations

from trident.curate.document import CurateError, Document
from trident.curate.stage import (
    Executor,
    GlobalStage,
    Stage,
    StreamingStage,
    build_stage,
    register_stage,
    registered_stages,
    stage_class,
)

__all__ = [
    "CurateError", "Document", "Executor", "GlobalStage", "Stage", "StreamingStage",
    "build_stage", "register_stage", "registered_stages", "stage_class",
]
