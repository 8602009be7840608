"""A job's step history (ListJobSteps) as plain rows."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, List, Optional

__all__ = ["StepRow", "History"]


@dataclasses.dataclass(frozen=True)
class StepRow:
    """One completed step as ppcoord recorded it (``pp.v1.JobStepRecord``).

    ``eval_loss`` is None unless the job evaluated after this step; ``skipped`` steps did not apply
    their update (non-finite loss or gradient norm). ``grad_norm`` is the global gradient norm before
    clipping (0 from a ppcoord that does not record it).
    """

    step: int
    attempt: int
    loss: float
    learning_rate: float
    grad_norm: float
    step_seconds: float
    tokens_per_second: float
    bubble_ratio: float
    eval_loss: Optional[float]
    skipped: bool
    time_unix: float

    @classmethod
    def from_proto(cls, record: Any) -> "StepRow":
        """The row of a ``pp.v1.JobStepRecord``."""
        return cls(
            step=record.step,
            attempt=record.attempt,
            loss=record.loss,
            learning_rate=record.learning_rate,
            grad_norm=getattr(record, "grad_norm", 0.0),
            step_seconds=record.step_seconds,
            tokens_per_second=record.tokens_per_second,
            bubble_ratio=record.bubble_ratio,
            eval_loss=record.eval_loss if record.has_eval else None,
            skipped=record.skipped,
            time_unix=record.time_unix,
        )


COLUMNS = [f.name for f in dataclasses.fields(StepRow)]


class History(List[StepRow]):
    """The recorded steps of one job, oldest first: a list of :class:`StepRow`.

    ppcoord keeps every step of a job of up to 4096 steps; of a longer one the newest 1024 at full
    resolution and older ones thinned (docs/jobs.md "Step history"), so steps may be missing.
    """

    def __init__(self, job_id: str, rows: Iterable[StepRow] = ()):
        super().__init__(rows)
        self.job_id = job_id

    def column(self, name: str) -> List[Any]:
        """One field of every row, e.g. ``history.column("loss")``."""
        if name not in COLUMNS:
            raise KeyError(f"no column {name!r}; columns: {', '.join(COLUMNS)}")
        return [getattr(row, name) for row in self]

    def to_pandas(self) -> Any:
        """A ``pandas.DataFrame`` indexed by step, one column per field (needs pandas: the
        ``pipeline-client[pandas]`` extra)."""
        try:
            import pandas
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "History.to_pandas needs pandas: pip install 'pipeline-client[pandas]'"
            ) from e
        frame = pandas.DataFrame([dataclasses.asdict(row) for row in self], columns=COLUMNS)
        return frame.set_index("step")
