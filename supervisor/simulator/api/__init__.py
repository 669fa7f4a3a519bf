"""Nomad's HTTP API on one simulated server: the routes, their parameters and Nomad's answers."""
