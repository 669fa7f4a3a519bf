"""The decisions, without I/O: the runner pool and its node tracker, the evidence they learn from, the
actions they return, and the settings they are made with."""
