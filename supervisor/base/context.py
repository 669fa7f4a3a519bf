"""What every part of a term draws on and reports to: one source of randomness, which a simulation
seeds so that a seed replays a run, and the faults that no retry mends, which health tells."""

from __future__ import annotations

from attrs import Factory, frozen

from .entropy import Entropy
from .faults import Faults

__all__ = ["TermContext"]


@frozen
class TermContext:
    """A term's entropy and faults, shared by its parts."""

    entropy: Entropy = Factory(Entropy)
    faults: Faults = Factory(Faults)
