"""What Nomad says, followed: list + watch + relist into evidence for the pool, and the admission gate
it reports the stream's health to."""
