"""Running an attempt: the context a workflow sees, op calls, timers, direct calls, and the journal a resume is checked against."""
