"""The error answer every route raises: Nomad's status code, its text body, and the headers it
carries (a read's 404 carries the query's index headers, as Nomad's ``setMeta`` runs first)."""

from __future__ import annotations

__all__ = ["NomadError"]


class NomadError(Exception):
    """An error answer: Nomad's status code, its text body, and its headers."""

    def __init__(self, status: int, text: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.headers = headers
