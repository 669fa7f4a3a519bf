"""The fault-injection API under ``/sim/v1``: what Nomad's own API cannot cause."""
