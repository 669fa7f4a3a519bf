"""The ground floor: the one exception tree, backoff, the one source of randomness, level state, the
network seam and small helpers every part uses."""
