"""Pipeline parallelism. `schedules` (pure data: instructions, partitioning, schedules), `overlap`
(when each transfer is posted and waited for: the executor's plan), `timeline` (Box, Timeline,
TimelineRecorder), `simulate` (checking and discrete-event timing of a schedule's plan),
`executor` (runs the plan on real ranks), `draw` (matplotlib picture of a timeline). Import the
module you need; nothing is re-exported here."""
