"""Every stage's settings checked when the flow file is loaded, before any stage runs: each source's
curation pipeline and overrides, the training config with the flow's overrides, the evaluation's
tasks, shots and data (and the held-out source that builds them). A mistake raises FlowConfigError
naming the key; load_flow adds the flow file's name.
"""
from __future__ import annotations

from pathlib import Path

from trident.config import ConfigError
from trident.flow.parsed import Flow, FlowConfigError, Source

HELDOUT_TASKS = ("lambada", "hellaswag")  # the formats trident.evaluate.heldout writes


def check_flow(flow: Flow) -> None:
    for check in (_check_curation, _check_train, _check_heldout, _check_eval, _check_decontamination):
        check(flow)


def _check_curation(flow: Flow) -> None:
    """Each source's pipeline config and overrides."""
    from trident.curate.run.pipeline import load_pipeline_config

    for index, source in enumerate(flow.sources):
        settings = flow.curate_of(source)
        try:
            load_pipeline_config(settings.config, settings.overrides)
        except ConfigError as error:
            raise FlowConfigError(f"sources[{index}] ({source.name}): curate: {error}") from None


def _check_train(flow: Flow) -> None:
    """The training config with train.overrides (and the data keys the flow sets), as `trident train`
    will check it on train.nproc processes."""
    from trident.config import load_config
    from trident.flow.start_model import adopt_start_model

    blend = ",".join(f"{s.weight},data/{s.name}" for s in flow.sources)
    given = [f"data.paths=[{blend}]", "data.tokenizer=tokenizer.json", *flow.train.overrides]
    try:
        config = load_config(flow.train.config, given)
        if flow.train.from_:  # the model is the starting model's, as `trident train` takes it
            adopt_start_model(flow, config)
        config.validate(flow.train.nproc)
    except ConfigError as error:
        raise FlowConfigError(f"train (config {flow.train.config}, overrides {flow.train.overrides}): "
                              f"{error}") from None


def heldout_source(flow: Flow) -> Source | None:
    """The source eval.heldout builds its tasks from, if any."""
    settings = flow.eval.heldout
    return next((s for s in flow.sources if s.name == settings.source), None) if settings else None


def holds_out_itself(source: Source) -> bool:
    """Whether the source's generator writes its held-out documents itself (stdlib-docstrings)."""
    return bool(source.generate and source.generate.holdout_every)


def _check_heldout(flow: Flow) -> None:
    settings, source = flow.eval.heldout, heldout_source(flow)
    if settings is None:
        return
    if source is None:
        names = ", ".join(s.name for s in flow.sources)
        raise FlowConfigError(f"eval.heldout.source: {settings.source!r} names no source (sources: {names})")
    if holds_out_itself(source) and settings.every is not None:
        raise FlowConfigError(f"eval.heldout.every: source {source.name!r} holds out every "
                              f"{source.generate.holdout_every}th document itself (generate.holdout_every); "
                              f"give one of the two")
    if not holds_out_itself(source) and settings.every is None:
        raise FlowConfigError(f"eval.heldout.every: give N to hold out about one document in N of source "
                              f"{source.name!r} for evaluation (e.g. every: 20)")
    if source.decontaminate:
        raise FlowConfigError(f"source {source.name!r}: decontaminate: true against its own held-out tasks "
                              f"cannot run (they are built from its curation); drop one of the two")
    if flow.eval.data_dir:
        raise FlowConfigError("eval: give either data_dir or heldout, not both")
    if not flow.eval.tasks:
        raise FlowConfigError(f"eval.heldout builds tasks but eval.tasks is empty: give tasks "
                              f"({', '.join(HELDOUT_TASKS)}) or drop heldout")
    other = [t for t in flow.eval.tasks if t not in HELDOUT_TASKS]
    if other:
        raise FlowConfigError(f"eval.tasks: {other} cannot be built from held-out text "
                              f"(eval.heldout builds {', '.join(HELDOUT_TASKS)})")


def _check_eval(flow: Flow) -> None:
    """Task names and shot counts; with data_dir, every task x shot cell read from it as `trident eval`
    will (the hub's data, without data_dir or heldout, is read only by the eval stage)."""
    from trident.evaluate.preflight import PreflightError, load_checked, plan_cells

    settings = flow.eval
    if not settings.tasks:
        return
    try:
        cells = plan_cells(settings.tasks, settings.shots)
        if settings.data_dir:
            if not Path(settings.data_dir).is_dir():
                raise PreflightError(f"data_dir {settings.data_dir} is not a folder")
            load_checked(cells, Path(settings.data_dir), settings.limit or None, settings.fewshot_construction)
    except PreflightError as error:
        raise FlowConfigError(f"eval: {error}") from None


def _check_decontamination(flow: Flow) -> None:
    for index, source in enumerate(flow.sources):
        if source.decontaminate and not (flow.eval.tasks and (flow.eval.data_dir or flow.eval.heldout)):
            raise FlowConfigError(f"sources[{index}].decontaminate: true needs the evaluation's task files: "
                                  f"eval.tasks with eval.data_dir or eval.heldout")
