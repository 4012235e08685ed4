"""The Schedule value a user steers: its loop handles, the transformation primitives (each a
function Schedule -> Schedule, checked when applied), the replayable Trace, and the low-level
schedule-tree rewrites they are built from."""
