"""A rich progress bar for the search (trials, feasible count, front size); a no-op when disabled."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import TracebackType

    from rich.progress import Progress


class SearchProgress:
    """Context manager showing search progress on stderr; does nothing when ``enabled`` is False."""

    def __init__(self, total: int, enabled: bool, label: str = "searching"):
        self.enabled = enabled
        self.total = total
        self.label = label
        self._progress: Progress | None = None
        self._task: Any = None  # rich's TaskID once shown

    def __enter__(self) -> SearchProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("feasible {task.fields[feasible]}  front {task.fields[front]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(self.label, total=self.total, feasible=0, front=0)
        return self

    def update(self, done: int, feasible: int, front: int) -> None:
        """Show `done` evaluations, the feasible count and the current front size."""
        if self._progress is not None:
            self._progress.update(self._task, completed=done, feasible=feasible, front=front)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.__exit__(exc_type, exc, tb)
