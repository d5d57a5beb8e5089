"""Label placement for the recommended points: greedy, non-overlapping boxes (pure geometry, in pixels).

Each label is drawn as a plotly annotation whose text box is centred at (point + offset), with an
arrow back to the point. Candidate offsets ring the point at growing radii; each label takes the
candidate whose box overlaps no earlier label box and no marker, stays inside the panel, and is
closest to its point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CHAR_PX = 7.4  # width of one character at the 12 px report font (Inter/Helvetica average, bold-ish)
LINE_PX = 17.0  # height of one text line
RADII = (34.0, 52.0, 72.0, 96.0, 124.0, 156.0)
ANGLES = tuple(math.radians(a) for a in (45, 135, -45, -135, 90, -90, 0, 180, 22, 158, -22, -158))
MARKER_PX = 10.0  # half-size of the star marker


@dataclass(frozen=True)
class Box:
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, o: Box) -> bool:
        return self.x0 < o.x1 and o.x0 < self.x1 and self.y0 < o.y1 and o.y0 < self.y1


def text_box(cx: float, cy: float, text: str) -> Box:
    """The box of a label centred at (cx, cy) (screen pixels, y down)."""
    w, h = CHAR_PX * max(len(text), 1) / 2 + 4, LINE_PX / 2 + 2
    return Box(cx - w, cy - h, cx + w, cy + h)


def place_labels(
    points: list[tuple[float, float]], texts: list[str], width: float, height: float
) -> list[tuple[float, float]]:
    """Offsets (ax, ay) in pixels, y down, for labels of points given in screen pixels of a
    width x height panel; boxes do not overlap each other or any of the points' markers."""
    markers = [Box(x - MARKER_PX, y - MARKER_PX, x + MARKER_PX, y + MARKER_PX) for x, y in points]
    placed: list[Box] = []
    out: list[tuple[float, float]] = []
    for (x, y), text in zip(points, texts, strict=True):
        best: tuple[float, float, float, Box] | None = None
        for r in RADII:
            for a in ANGLES:
                ax, ay = r * math.cos(a), -r * math.sin(a)
                box = text_box(x + ax, y + ay, text)
                clash = (
                    sum(box.overlaps(b) for b in placed) * 1e6 + sum(box.overlaps(m) for m in markers) * 1e3
                )
                outside = (
                    max(0.0, -box.x0)
                    + max(0.0, box.x1 - width)
                    + max(0.0, -box.y0)
                    + max(0.0, box.y1 - height)
                )
                score = clash + outside * 10 + r
                if best is None or score < best[0]:
                    best = (score, ax, ay, box)
        assert best is not None
        placed.append(best[3])
        out.append((best[1], best[2]))
    return out
