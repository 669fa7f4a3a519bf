"""The ground floor: the one exception tree, backoff, level state, the network seam and small helpers
every part uses."""
