"""Where every random choice and every generated identifier of the daemon comes from: one source,
handed to each part that draws, so that a simulation can seed the whole daemon and replay one run.

``Entropy()`` draws from the process (``random.random`` for jitter, ``uuid.uuid4`` for IDs, read
from the operating system's randomness); ``Entropy.seeded(seed)`` draws both from one
``random.Random(seed)``, the same sequence for the same seed.
"""

from __future__ import annotations

import random
import uuid
from typing import final

from attrs import field, frozen

__all__ = ["Entropy"]


@final
@frozen(eq=False)
class Entropy:
    """A source of uniform fractions (for jitter) and version-4 UUIDs (for IDs)."""

    # None: the process's own randomness, as every part drew before there was a source to seed.
    _rng: random.Random | None = field(default=None, alias="rng")

    @classmethod
    def seeded(cls, seed: int) -> Entropy:
        """A source whose fractions and UUIDs follow from ``seed`` alone."""
        return cls(rng=random.Random(seed))

    def fraction(self) -> float:
        """A uniform number in [0, 1)."""
        return random.random() if self._rng is None else self._rng.random()

    def uuid(self) -> str:
        """A fresh version-4 UUID, as text."""
        if self._rng is None:
            return str(uuid.uuid4())
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
