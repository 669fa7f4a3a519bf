"""A picture of one simulated run: each pool's idle runners, the event stream, the faults and the
claims over virtual time, as an SVG file (no dependency: a few polylines and rectangles)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import trio
from attrs import define, field

from .faults import FaultLog

if TYPE_CHECKING:
    from .checks import Checks, Violation
    from .world import World

__all__ = ["Timeline"]

_WIDTH: Final = 1000
_LANE: Final = 120
_MARGIN: Final = 40
_COLOURS: Final = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")


@define(eq=False)
class Timeline:
    """Samples taken every virtual second."""

    times: list[float] = field(factory=list)
    idle: dict[int, list[int]] = field(factory=dict)
    stream_up: list[bool] = field(factory=list)
    claims: list[int] = field(factory=list)
    log: FaultLog | None = None

    async def sample(self, world: World, checks: Checks, log: FaultLog) -> None:
        """Sample until cancelled."""
        self.log = log
        while True:
            acting = [s.daemon.service for s in world.acting() if s.daemon is not None and s.daemon.service]
            self.times.append(trio.current_time())
            stats = acting[0].pool.stats() if acting else {}
            for environment in sorted(set(self.idle) | set(stats)):
                series = self.idle.setdefault(environment, [0] * (len(self.times) - 1))
                series.append(stats[environment].idle if environment in stats else 0)
            self.stream_up.append(bool(acting) and acting[0].informer.is_synced())
            self.claims.append(checks.claims)
            await trio.sleep(1.0)

    def svg(self, title: str, violations: list[Violation]) -> str:
        """The picture."""
        end = max(self.times[-1] if self.times else 1.0, 1.0)

        def x(t: float) -> float:
            return _MARGIN + (_WIDTH - 2 * _MARGIN) * t / end

        height = 4 * _LANE + 2 * _MARGIN
        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" font-size="11">',
            f'<text x="{_MARGIN}" y="20">{_escape(title)}</text>',
        ]
        top = _MARGIN
        most = max([1, *(max(s, default=0) for s in self.idle.values())])
        for i, (environment, series) in enumerate(sorted(self.idle.items())):
            points = " ".join(
                f"{x(t):.1f},{top + _LANE - _LANE * v / most:.1f}"
                for t, v in zip(self.times, series, strict=False)
            )
            colour = _COLOURS[i % len(_COLOURS)]
            parts.append(f'<polyline fill="none" stroke="{colour}" points="{points}"/>')
            parts.append(
                f'<text x="{_WIDTH - _MARGIN + 2}" y="{top + 12 * (i + 1)}" '
                f'fill="{colour}">{environment}</text>'
            )
        parts.append(f'<text x="2" y="{top + 10}">idle</text>')
        top += _LANE + 10
        for t, up in zip(self.times, self.stream_up, strict=False):
            if not up:
                parts.append(
                    f'<rect x="{x(t):.1f}" y="{top}" width="{x(1) - x(0):.1f}" height="20" fill="#d62728"/>'
                )
        parts.append(f'<text x="2" y="{top + 14}">stream down</text>')
        top += 40
        for i, window in enumerate(self.log.windows if self.log else []):
            y = top + (i % 8) * 12
            width = max(x(window.end) - x(window.start), 2.0)
            parts.append(
                f'<rect x="{x(window.start):.1f}" y="{y}" width="{width:.1f}" height="9" '
                'fill="#ff7f0e" opacity="0.6"/>'
            )
            parts.append(
                f'<text x="{x(window.start) + 2:.1f}" y="{y + 8}" font-size="8">{window.kind}</text>'
            )
        top += 8 * 12 + 10
        most_claims = max([1, *self.claims])
        points = " ".join(
            f"{x(t):.1f},{top + _LANE - _LANE * c / most_claims:.1f}"
            for t, c in zip(self.times, self.claims, strict=False)
        )
        parts.append(f'<polyline fill="none" stroke="#333" points="{points}"/>')
        parts.append(f'<text x="2" y="{top + 10}">claims</text>')
        for violation in violations:
            parts.append(
                f'<line x1="{x(violation.at):.1f}" y1="{_MARGIN}" x2="{x(violation.at):.1f}" '
                f'y2="{height}" stroke="red"/>'
            )
        parts.append("</svg>")
        return "\n".join(parts)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
