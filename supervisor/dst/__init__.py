"""Deterministic simulation: the daemon and the simulated cluster in one trio run on virtual time,
under a seed's fault schedule and load, with every promise checked as the run goes."""
