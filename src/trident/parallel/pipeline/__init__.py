"""Pipeline parallelism. `schedules` (pure data: instructions, partitioning, schedules), `timeline`
(Box, Timeline, TimelineRecorder), `simulate` (checking and discrete-event timing of schedules),
`executor` (runs a schedule on real ranks), `draw` (matplotlib picture of a timeline). Import the
module you need; nothing is re-exported here."""
