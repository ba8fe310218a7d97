"""Running a pipeline: pipeline.run_pipeline and pipeline.load_pipeline_config (config.CurationConfig),
registry.build_stage / stage_class / registered_stages, phases (streaming and global phases, resumable
by completion markers), executors.make_executor (local processes or Ray), report.write_report, and
why.why (`trident curate why`).
"""
