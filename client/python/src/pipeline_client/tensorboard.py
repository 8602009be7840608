"""TensorBoard export of a job's step history (the ``tensorboard`` or ``tensorboardX`` extra)."""

from __future__ import annotations

import os
from typing import Iterable, List, Optional, Tuple

from .history import StepRow

__all__ = ["SCALARS", "write_scalars"]

# The tags written for every step (eval_loss only for the steps the job evaluated after).
SCALARS: Tuple[str, ...] = (
    "loss",
    "learning_rate",
    "grad_norm",
    "step_seconds",
    "tokens_per_second",
    "bubble_ratio",
    "eval_loss",
)


def _points(rows: Iterable[StepRow]) -> List[Tuple[str, float, int, float]]:
    """(tag, value, step, wall time) of every scalar of every row, in step order."""
    points = []
    for row in rows:
        for tag in SCALARS:
            value = getattr(row, tag)
            if value is None:
                continue
            points.append((tag, float(value), int(row.step), float(row.time_unix)))
    return points


def _write_tensorboard(points, logdir: str, suffix: str) -> str:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(logdir, max_queue_size=1000, filename_suffix=suffix)
    try:
        for tag, value, step, wall_time in points:
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
            writer.add_event(event_pb2.Event(wall_time=wall_time, step=step, summary=summary))
    finally:
        writer.close()
    return writer._file_name  # noqa: SLF001 - the one file it wrote


def _write_tensorboardx(points, logdir: str, suffix: str) -> str:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(logdir=logdir, filename_suffix=suffix)
    try:
        for tag, value, step, wall_time in points:
            writer.add_scalar(tag, value, global_step=step, walltime=wall_time)
    finally:
        writer.close()
    return writer.file_writer.event_writer._file_name  # noqa: SLF001


def write_scalars(
    rows: Iterable[StepRow], logdir: str, *, suffix: str = "", backend: Optional[str] = None
) -> str:
    """Writes ``rows`` as TensorBoard scalars into a new event file under ``logdir``.

    Every row gives one point of each tag in :data:`SCALARS` at its step, with the step's
    ``time_unix`` as wall time (``eval_loss`` only where the job evaluated). Non-finite values
    (a skipped step's loss) are written as they are; TensorBoard shows them as gaps.

    Args:
        rows: the steps, e.g. ``client.history(job)``.
        logdir: the folder (created if missing). Each call writes a new file: give a fresh folder
            per export, or TensorBoard shows the points twice.
        suffix: appended to the event file's name.
        backend: ``"tensorboard"`` or ``"tensorboardX"``; None: tensorboard if installed, else
            tensorboardX.

    Returns:
        The path of the event file written.

    Raises:
        ImportError: neither package is installed (``pip install 'pipeline-client[tensorboard]'``).
    """
    points = _points(rows)
    os.makedirs(logdir, exist_ok=True)
    writers = {"tensorboard": _write_tensorboard, "tensorboardX": _write_tensorboardx}
    if backend is not None:
        if backend not in writers:
            raise ValueError(f"backend must be 'tensorboard' or 'tensorboardX', not {backend!r}")
        return writers[backend](points, logdir, suffix)
    errors = []
    for name, write in writers.items():
        try:
            return write(points, logdir, suffix)
        except ImportError as e:
            errors.append(f"{name}: {e}")
    raise ImportError(
        "export_tensorboard needs tensorboard or tensorboardX: "
        "pip install 'pipeline-client[tensorboard]' (" + "; ".join(errors) + ")"
    )


