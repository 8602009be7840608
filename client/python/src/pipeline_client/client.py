"""The job API client: one TLS channel to ppcoord, a bearer token, typed errors."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Iterator, List, Mapping, Optional, Tuple, Union

import grpc
from google.protobuf import json_format, text_format

from . import errors
from ._pb import coordinator_pb2, coordinator_pb2_grpc, job_pb2, schedule_pb2
from .history import History, StepRow

__all__ = ["Client", "TERMINAL_STATES", "JobRef", "SpecLike", "state_name", "load_spec"]

# A job: its id, or a Job message (anything with an ``id``).
JobRef = Union[str, job_pb2.Job]
# A job spec: a dict (proto3 JSON field names, camelCase or snake_case), a path to a JSON or
# text-format file, or a JobSpec message.
SpecLike = Union[Mapping[str, Any], str, "os.PathLike[str]", job_pb2.JobSpec]

# The states a job never leaves (proto/pp/v1/job.proto JobState).
TERMINAL_STATES = frozenset({job_pb2.SUCCEEDED, job_pb2.FAILED, job_pb2.CANCELLED})
_TERMINAL_EVENTS = frozenset(
    {coordinator_pb2.EVENT_FINISHED, coordinator_pb2.EVENT_FAILED, coordinator_pb2.EVENT_CANCELLED}
)
_UNKNOWN_FIELD = re.compile(r'has no field named "([^"]+)" at "JobSpec((?:\.[A-Za-z0-9_]+)*)"')


def state_name(state: int) -> str:
    """The name of a ``JobState`` value: ``state_name(job.state) == "SUCCEEDED"``."""
    return job_pb2.JobState.Name(state)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def load_spec(spec: SpecLike) -> job_pb2.JobSpec:
    """A ``JobSpec`` from a dict, a JSON or text-format file, or a ``JobSpec`` (returned as is).

    Raises:
        InvalidSpec: the dict or file is not a valid JobSpec (an unknown field, a wrong type); its
            ``field`` names the field when the parser does.
        FileNotFoundError: a path that does not exist.
        TypeError: anything else.
    """
    if isinstance(spec, job_pb2.JobSpec):
        return spec
    origin = "spec"
    if isinstance(spec, Mapping):
        document: Any = spec
        text = None
    elif isinstance(spec, (str, os.PathLike)):
        origin = os.fspath(spec)
        with open(origin, encoding="utf-8") as f:
            text = f.read()
        document = None
        if text.lstrip().startswith("{"):
            try:
                document = json.loads(text)
            except json.JSONDecodeError as e:
                raise errors.InvalidSpec(f"{origin}: not a valid JobSpec (JSON): {e}") from e
    else:
        raise TypeError(f"a job spec is a dict, a file path or a JobSpec, not {type(spec).__name__}")
    message = job_pb2.JobSpec()
    try:
        if document is not None:
            json_format.ParseDict(document, message)
        else:
            text_format.Parse(text, message)
    except (json_format.ParseError, text_format.ParseError) as e:
        error = errors.InvalidSpec(f"{origin}: not a valid JobSpec: {e}")
        unknown = _UNKNOWN_FIELD.search(str(e))
        if unknown:
            path = [_snake(p) for p in unknown.group(2).split(".") if p] + [_snake(unknown.group(1))]
            error.field = ".".join(path)
        raise error from e
    return message


def _job_id(job: JobRef) -> str:
    if isinstance(job, str):
        return job
    job_id = getattr(job, "id", None) or getattr(job, "job_id", None)
    if not job_id:
        raise TypeError(f"a job is its id or a Job message, not {type(job).__name__}")
    return job_id


def _read(path_or_pem: Union[str, bytes, "os.PathLike[str]"]) -> bytes:
    if isinstance(path_or_pem, bytes):
        return path_or_pem
    if isinstance(path_or_pem, str) and path_or_pem.lstrip().startswith("-----BEGIN"):
        return path_or_pem.encode()
    with open(path_or_pem, "rb") as f:
        return f.read()


class LogLines:
    """An iterator of a job's log lines (``pp.v1.JobLogLine``: worker, attempt, rank, seq,
    time_unix, text), as :meth:`Client.logs` returns it.

    ``dropped`` counts the lines the workers' bounded buffers dropped before the lines returned;
    ``unreachable`` is the set of workers that did not answer some call (their lines are missing).
    """

    def __init__(self, lines: Iterator[Any]):
        self._lines = lines
        self.dropped = 0
        self.unreachable: set = set()

    def __iter__(self) -> "LogLines":
        return self

    def __next__(self) -> Any:
        return next(self._lines)


class Client:
    """A client of ppcoord's job API (``pp.v1.Coordinator``).

    Args:
        address: ppcoord's gRPC address, ``host:port`` (``ppctl up`` prints it after
            ``--coordinator=``).
        ca: the CA certificate to trust: a PEM file's path, or the PEM itself (``--ca=``).
        token: the bearer token, sent as ``authorization: Bearer TOKEN`` on every call.
        token_file: a file holding the token (``--token_file=``); exclusive with ``token``.
        tls: whether to use TLS. None: when ``ca`` or a token is given (the system's roots
            without ``ca``). False sends a token in plaintext, which only ``ppcoord --insecure``
            accepts.
        timeout: seconds each unary call may take.
        server_name: the name to check the server's certificate against, when it is not the
            address's host.

    Use as a context manager, or call :meth:`close`. Thread-safe as gRPC channels are.
    Every method raises a :class:`pipeline_client.errors.PipelineError` subclass on failure.
    """

    def __init__(
        self,
        address: str,
        ca: Optional[Union[str, bytes, "os.PathLike[str]"]] = None,
        token: Optional[str] = None,
        token_file: Optional[Union[str, "os.PathLike[str]"]] = None,
        *,
        tls: Optional[bool] = None,
        timeout: float = 30.0,
        server_name: Optional[str] = None,
    ) -> None:
        if token is not None and token_file is not None:
            raise ValueError("give token or token_file, not both")
        if token_file is not None:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
            if not token:
                raise ValueError(f"token file {os.fspath(token_file)} is empty")
        self.address = address
        self.timeout = timeout
        self._metadata: Tuple[Tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        if tls is None:
            tls = ca is not None or bool(token)
        options: List[Tuple[str, Any]] = [("grpc.max_receive_message_length", 64 << 20)]
        if tls:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(ca) if ca is not None else None
            )
            if server_name:
                options.append(("grpc.ssl_target_name_override", server_name))
            self._channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)

    @classmethod
    def from_env(cls, **kwargs: Any) -> "Client":
        """A client from $PP_ADDRESS, $PP_CA and $PP_TOKEN_FILE (or $PP_TOKEN)."""
        address = os.environ.get("PP_ADDRESS")
        if not address:
            raise ValueError("set PP_ADDRESS to ppcoord's host:port")
        return cls(
            address,
            ca=os.environ.get("PP_CA") or None,
            token=os.environ.get("PP_TOKEN") or None,
            token_file=os.environ.get("PP_TOKEN_FILE") or None,
            **kwargs,
        )

    # ---- plumbing ----

    def close(self) -> None:
        """Closes the channel."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: str, request: Any, timeout: Optional[float] = None) -> Any:
        try:
            return getattr(self._stub, method)(
                request, metadata=self._metadata, timeout=timeout or self.timeout
            )
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, method) from None

    # ---- jobs ----

    def submit(self, spec: SpecLike) -> str:
        """Submits a job and returns its id.

        Args:
            spec: a dict (proto3 JSON names, e.g. ``{"model": {"d_model": 64, ...}, ...}``), a path
                to a JSON or text-format spec file (as ``ppctl submit`` takes), or a ``JobSpec``.

        Raises:
            InvalidSpec: the spec is refused; ``.field`` names the field (``"model.n_heads"``).
            PermissionDenied: the token's role may not submit (a view token).
        """
        request = coordinator_pb2.SubmitJobRequest(spec=load_spec(spec))
        return self._call("SubmitJob", request).job_id

    def get(self, job: JobRef) -> job_pb2.Job:
        """The job now (``pp.v1.Job``: state, step, loss, owner, placement, ...)."""
        return self._call("GetJob", coordinator_pb2.GetJobRequest(job_id=_job_id(job)))

    def list(self, page_size: int = 0) -> Iterator[job_pb2.Job]:
        """Every job, in submission order, following ListJobs' pages to the end.

        Args:
            page_size: jobs per call; 0: the server's default (100), at most 1000.
        """
        token = ""
        while True:
            page = self._call(
                "ListJobs", coordinator_pb2.ListJobsRequest(page_size=page_size, page_token=token)
            )
            yield from page.jobs
            token = page.next_page_token
            if not token:
                return

    def watch(self, job: JobRef, timeout: Optional[float] = None) -> Iterator[Any]:
        """The job's events (``pp.v1.JobEvent``: kind, step, loss, message, ...) as they happen,
        until the job ends (an ``EVENT_FINISHED``, ``EVENT_FAILED`` or ``EVENT_CANCELLED``, after
        which the stream closes) or ``timeout`` seconds pass (:class:`DeadlineExceeded`)."""
        stream = self._stub.WatchJob(
            coordinator_pb2.WatchJobRequest(job_id=_job_id(job)),
            metadata=self._metadata,
            timeout=timeout,
        )
        try:
            for event in stream:
                yield event
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, "WatchJob") from None
        finally:
            stream.cancel()

    def wait(self, job: JobRef, timeout: Optional[float] = None) -> job_pb2.Job:
        """Waits until the job is SUCCEEDED, FAILED or CANCELLED and returns it.

        Watches the job (and asks GetJob again if the stream ends early, e.g. a ppcoord restart).
        A failed job is returned, not raised: check ``state_name(job.state)`` and ``job.reason``.

        Raises:
            WaitTimeout: it has not ended after ``timeout`` seconds (None: wait for ever); the
                exception's ``job`` is its last state.
        """
        job_id = _job_id(job)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            current = self.get(job_id)
            if current.state in TERMINAL_STATES:
                return current
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise errors.WaitTimeout(
                    f"job {job_id} is still {state_name(current.state)} at step {current.step} "
                    f"after {timeout:g} s",
                    current,
                )
            try:
                ended = False
                for event in self.watch(job_id, timeout=remaining):
                    if event.kind in _TERMINAL_EVENTS:
                        ended = True
                        break
                if not ended:
                    time.sleep(0.2)  # the stream closed early: look again
            except (errors.DeadlineExceeded, errors.Unavailable):
                time.sleep(0.2 if remaining is None else min(0.2, max(remaining, 0)))

    def cancel(self, job: JobRef) -> job_pb2.Job:
        """Cancels the job (its owner or an admin) and returns it."""
        return self._call("CancelJob", coordinator_pb2.CancelJobRequest(job_id=_job_id(job)))

    def resume(
        self,
        job: JobRef,
        step: int = 0,
        *,
        steps: int = 0,
        epoch: int = 0,
        parallel: Optional[Union[Mapping[str, Any], job_pb2.ParallelSpec]] = None,
    ) -> job_pb2.Job:
        """Resumes an ended job from a committed checkpoint (its owner or an admin).

        Args:
            step: the checkpoint step; 0: the newest.
            steps: a new total ``train.steps``; 0 keeps the spec's.
            epoch: >0: the newest checkpoint at or before that epoch's start (exclusive with step).
            parallel: a new layout (a dict or a ``ParallelSpec``).
        """
        request = coordinator_pb2.ResumeJobRequest(
            job_id=_job_id(job), step=step, steps=steps, epoch=epoch
        )
        if parallel is not None:
            if isinstance(parallel, Mapping):
                parallel = json_format.ParseDict(parallel, job_pb2.ParallelSpec())
            request.parallel.CopyFrom(parallel)
        return self._call("ResumeJob", request)

    def plan(self, spec: SpecLike) -> Any:
        """What the planner would run for a spec, without submitting it (``pp.v1.PlanJobResponse``:
        schedule with its simulation, stage_layers, ascii timeline, mesh, memory)."""
        return self._call("PlanJob", coordinator_pb2.PlanJobRequest(spec=load_spec(spec)))

    def history(self, job: JobRef, *, from_step: int = 0, page_size: int = 0) -> History:
        """The job's recorded steps, oldest first, every page of ListJobSteps.

        Args:
            from_step: the first step to return (0 or 1: from the start).
            page_size: records per call; 0: the server's default (1000), at most 10000.

        Returns:
            A :class:`History` (a list of :class:`StepRow`, with ``to_pandas()``).
        """
        job_id = _job_id(job)
        rows = History(job_id)
        token = ""
        while True:
            page = self._call(
                "ListJobSteps",
                coordinator_pb2.ListJobStepsRequest(
                    job_id=job_id, page_size=page_size, page_token=token, from_step=from_step
                ),
            )
            rows.extend(StepRow.from_proto(record) for record in page.steps)
            if not page.next_page_token or not page.steps:
                return rows
            if page.next_page_token == token:
                raise errors.InternalError(f"ListJobSteps({job_id}) repeated page token {token!r}")
            token = page.next_page_token

    def logs(
        self,
        job: JobRef,
        follow: bool = False,
        *,
        rank: Optional[int] = None,
        max_lines: int = 0,
        poll_seconds: float = 0.5,
        timeout: Optional[float] = None,
    ) -> LogLines:
        """The lines the job's workers wrote for it (GetJobLogs), oldest first per worker.

        Args:
            follow: keep asking for new lines every ``poll_seconds`` until the job has ended, then
                once more; False: the lines kept now.
            rank: one global rank; None: every rank.
            max_lines: lines per call; 0: the server's default (1000).
            timeout: with follow, stop (:class:`WaitTimeout`) after this many seconds.

        Returns:
            A :class:`LogLines` iterator of ``pp.v1.JobLogLine`` (worker, attempt, rank, seq,
            time_unix, text). Lazy: the calls happen as it is iterated.
        """
        job_id = _job_id(job)
        deadline = None if timeout is None else time.monotonic() + timeout
        out: LogLines

        def lines() -> Iterator[Any]:
            token = ""
            while True:
                ended = follow and self.get(job_id).state in TERMINAL_STATES
                request = coordinator_pb2.GetJobLogsRequest(
                    job_id=job_id, page_token=token, max_lines=max_lines
                )
                if rank is not None:
                    request.rank = rank
                page = self._call("GetJobLogs", request)
                out.dropped += page.dropped
                out.unreachable.update(page.unreachable)
                yield from page.lines
                token = page.next_page_token or token
                full = len(page.lines) >= (max_lines or 1000)
                if full:
                    continue  # more are waiting
                if not follow or ended:
                    return
                if deadline is not None and time.monotonic() >= deadline:
                    raise errors.WaitTimeout(f"logs of job {job_id}: still running after {timeout:g} s")
                time.sleep(poll_seconds)

        out = LogLines(lines())
        return out

    def workers(self) -> List[Any]:
        """The registered workers (``pp.v1.WorkerInfo``)."""
        return list(self._call("ListWorkers", coordinator_pb2.ListWorkersRequest()).workers)

    def trace(self, job: JobRef, step: int = 0) -> schedule_pb2.StepTrace:
        """A traced step's measured actions (``pp.v1.StepTrace``); step 0: the newest traced."""
        return self._call("GetTrace", coordinator_pb2.GetTraceRequest(job_id=_job_id(job), step=step))

    def export_tensorboard(
        self, job: JobRef, logdir: Union[str, "os.PathLike[str]"], *, backend: Optional[str] = None
    ) -> str:
        """Writes the job's history as TensorBoard scalars into a new event file under ``logdir``
        and returns its path (``tensorboard --logdir=LOGDIR`` shows them).

        Tags: loss, learning_rate, grad_norm, step_seconds, tokens_per_second, bubble_ratio, and
        eval_loss at the evaluated steps; each point at its step, with the step's time as wall time.
        Needs the ``tensorboard`` extra (or tensorboardX): ``pip install
        'pipeline-client[tensorboard]'``.
        """
        from .tensorboard import write_scalars

        job_id = _job_id(job)
        return write_scalars(self.history(job_id), os.fspath(logdir), suffix=f".{job_id}",
                             backend=backend)
