"""pipeline-client: the Python client of the pipeline training service's job API.

    from pipeline_client import Client
    client = Client("127.0.0.1:50051", ca="ca.crt", token_file="token")
    job = client.submit({"model": {...}, "parallel": {...}, "train": {...}, "data": {...}})
    print(client.wait(job, timeout=600).state)

See client/python/README.md.
"""

from . import errors
from ._pb import coordinator_pb2, job_pb2, schedule_pb2
from .client import TERMINAL_STATES, Client, LogLines, load_spec, state_name
from .errors import *  # noqa: F401,F403 (the typed errors, errors.__all__)
from .history import History, StepRow

JobSpec = job_pb2.JobSpec
Job = job_pb2.Job
JobState = job_pb2.JobState

__version__ = "0.1.0"

__all__ = [
    "Client",
    "LogLines",
    "History",
    "StepRow",
    "TERMINAL_STATES",
    "load_spec",
    "state_name",
    "JobSpec",
    "Job",
    "JobState",
    "coordinator_pb2",
    "job_pb2",
    "schedule_pb2",
    "errors",
] + errors.__all__
