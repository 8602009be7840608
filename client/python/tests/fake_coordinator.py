"""An in-process fake of ppcoord's job API (pp.v1.Coordinator), plaintext on loopback, for the
client's offline tests: paging, following logs, waiting, and the mapping of gRPC codes."""

import threading
from concurrent import futures

import grpc

from pipeline_client import coordinator_pb2, job_pb2
from pipeline_client._pb import coordinator_pb2_grpc


class FakeCoordinator(coordinator_pb2_grpc.CoordinatorServicer):
    """Serves `jobs` (id -> Job), `steps` (id -> [JobStepRecord]) and `log_lines` (id -> lines
    appended while it runs). Records every request in `calls` as (method, request)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.jobs = {}
        self.steps = {}
        self.log_lines = {}
        self.calls = []
        self.submit_error = None  # (code, details) to answer SubmitJob with
        self.get_hook = None      # called with the job id on every GetJob
        self.watch_events = {}    # id -> events WatchJob sends before it closes

    def _record(self, method, request):
        with self.lock:
            self.calls.append((method, request))

    def count(self, method):
        with self.lock:
            return sum(1 for m, _ in self.calls if m == method)

    def SubmitJob(self, request, context):
        self._record("SubmitJob", request)
        if self.submit_error:
            context.abort(*self.submit_error)
        job_id = f"{request.spec.name or 'job'}-{len(self.jobs) + 1}"
        self.jobs[job_id] = job_pb2.Job(id=job_id, spec=request.spec, state=job_pb2.QUEUED)
        return coordinator_pb2.SubmitJobResponse(job_id=job_id)

    def GetJob(self, request, context):
        self._record("GetJob", request)
        if self.get_hook:
            self.get_hook(request.job_id)
        if request.job_id not in self.jobs:
            context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id} not found")
        return self.jobs[request.job_id]

    def ListJobs(self, request, context):
        self._record("ListJobs", request)
        ids = sorted(self.jobs)
        start = ids.index(request.page_token) + 1 if request.page_token else 0
        size = request.page_size or 100
        page = ids[start:start + size]
        token = page[-1] if start + size < len(ids) else ""
        return coordinator_pb2.ListJobsResponse(jobs=[self.jobs[i] for i in page],
                                                next_page_token=token)

    def WatchJob(self, request, context):
        self._record("WatchJob", request)
        for event in self.watch_events.get(request.job_id, []):
            yield event

    def ListJobSteps(self, request, context):
        self._record("ListJobSteps", request)
        if request.page_size < 0 or request.page_size > 10000:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_size: must be in 0..10000")
        records = self.steps.get(request.job_id, [])
        size = request.page_size or 1000
        if request.page_token:
            after = int(request.page_token)
            start = next((i for i, r in enumerate(records) if r.step > after), len(records))
        else:
            start = next((i for i, r in enumerate(records) if r.step >= request.from_step),
                         len(records))
        page = records[start:start + size]
        token = str(page[-1].step) if start + size < len(records) else ""
        return coordinator_pb2.ListJobStepsResponse(steps=page, next_page_token=token)

    def GetJobLogs(self, request, context):
        self._record("GetJobLogs", request)
        lines = self.log_lines.get(request.job_id, [])
        start = int(request.page_token or "0")
        size = request.max_lines or 1000
        page = lines[start:start + size]
        if request.HasField("rank"):
            page = [line for line in page if line.rank == request.rank]
        return coordinator_pb2.GetJobLogsResponse(
            lines=page, next_page_token=str(start + len(lines[start:start + size])),
            unreachable=["w9"] if start == 0 else [])

    def CancelJob(self, request, context):
        self._record("CancelJob", request)
        context.abort(grpc.StatusCode.PERMISSION_DENIED,
                      f"CancelJob: job {request.job_id} is not yours")


class Server:
    """A FakeCoordinator served on 127.0.0.1:<free port>; use as a context manager."""

    def __init__(self):
        self.fake = FakeCoordinator()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        coordinator_pb2_grpc.add_CoordinatorServicer_to_server(self.fake, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc):
        self.server.stop(grace=None).wait(5)


def records(count, *, thin_before=0, every=1, eval_every=0, skip=()):
    """JobStepRecords of steps 1..count; before `thin_before` only every `every`-th step."""
    out = []
    for step in range(1, count + 1):
        if step < thin_before and step % every:
            continue
        out.append(coordinator_pb2.JobStepRecord(
            step=step, attempt=0, loss=10.0 / step, learning_rate=0.001 * (1 + step % 3),
            grad_norm=1.0 + step / 1000.0, step_seconds=0.01, tokens_per_second=1000.0 + step,
            bubble_ratio=0.25, has_eval=bool(eval_every and step % eval_every == 0),
            eval_loss=(11.0 / step) if eval_every and step % eval_every == 0 else 0.0,
            skipped=step in skip, time_unix=1.7e9 + step))
    return out


