"""Typed exceptions for the job API's gRPC status codes.

Every call of :class:`pipeline_client.Client` raises a :class:`PipelineError` subclass instead of
a raw ``grpc.RpcError``; the original code and details stay on the exception (``code``,
``details``) and the ``grpc.RpcError`` itself is its ``rpc_error``.
"""

from __future__ import annotations

import re
from typing import Dict, Optional, Type

import grpc

__all__ = [
    "PipelineError",
    "InvalidSpec",
    "NotFound",
    "AlreadyExists",
    "FailedPrecondition",
    "PermissionDenied",
    "Unauthenticated",
    "ResourceExhausted",
    "Unavailable",
    "DeadlineExceeded",
    "Unimplemented",
    "Cancelled",
    "InternalError",
    "WaitTimeout",
    "from_rpc_error",
    "spec_field",
]


class PipelineError(Exception):
    """A failed call of the job API.

    Attributes:
        code: the gRPC status code (``grpc.StatusCode``), or None for errors raised by the client
            itself (:class:`WaitTimeout`).
        details: the server's message, one line.
        method: the RPC that failed, e.g. ``"SubmitJob"``; empty when unknown.
        rpc_error: the ``grpc.RpcError`` it stands for, or None.
    """

    rpc_error: Optional[grpc.RpcError] = None

    def __init__(self, details: str, code: Optional[grpc.StatusCode] = None, method: str = ""):
        self.details = details
        self.code = code
        self.method = method
        prefix = f"{method}: " if method else ""
        suffix = f" ({code.name})" if code is not None else ""
        super().__init__(f"{prefix}{details}{suffix}")


class InvalidSpec(PipelineError):
    """INVALID_ARGUMENT: the server refused the request, usually a job spec.

    ``field`` is the spec field the message names (``"model.n_heads"``), or None when it names none.
    """

    def __init__(self, details: str, code: Optional[grpc.StatusCode] = None, method: str = ""):
        super().__init__(details, code, method)
        self.field: Optional[str] = spec_field(details)


class NotFound(PipelineError):
    """NOT_FOUND: no such job (or it expired: ``ppcoord --retain_jobs``)."""


class AlreadyExists(PipelineError):
    """ALREADY_EXISTS."""


class FailedPrecondition(PipelineError):
    """FAILED_PRECONDITION: the job is not in a state that allows the call (e.g. resume a running job)."""


class PermissionDenied(PipelineError):
    """PERMISSION_DENIED: the token's role (or ownership of the job) does not allow the call."""


class Unauthenticated(PipelineError):
    """UNAUTHENTICATED: no token, an unknown token, or a denied certificate."""


class ResourceExhausted(PipelineError):
    """RESOURCE_EXHAUSTED: a service limit (queue quota, open watches, ...) is reached."""


class Unavailable(PipelineError):
    """UNAVAILABLE: ppcoord cannot be reached (not running, wrong address, TLS mismatch)."""


class DeadlineExceeded(PipelineError):
    """DEADLINE_EXCEEDED: the call's timeout passed."""


class Unimplemented(PipelineError):
    """UNIMPLEMENTED: this ppcoord does not offer the method (an older server)."""


class Cancelled(PipelineError):
    """CANCELLED: the call was cancelled."""


class InternalError(PipelineError):
    """INTERNAL, UNKNOWN, DATA_LOSS and every other code."""


class WaitTimeout(PipelineError, TimeoutError):
    """:meth:`Client.wait` gave up: the job did not end within the timeout. ``job`` is its last state."""

    def __init__(self, details: str, job=None):
        super().__init__(details)
        self.job = job


_BY_CODE: Dict[grpc.StatusCode, Type[PipelineError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidSpec,
    grpc.StatusCode.OUT_OF_RANGE: InvalidSpec,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ABORTED: FailedPrecondition,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.CANCELLED: Cancelled,
}


def from_rpc_error(rpc_error: grpc.RpcError, method: str = "") -> PipelineError:
    """The :class:`PipelineError` subclass for a ``grpc.RpcError`` (a call's or a stream's)."""
    code = rpc_error.code() if hasattr(rpc_error, "code") else grpc.StatusCode.UNKNOWN
    details = rpc_error.details() if hasattr(rpc_error, "details") else str(rpc_error)
    cls = _BY_CODE.get(code, InternalError)
    error = cls(details or "", code, method)
    error.rpc_error = rpc_error
    return error


# A spec field as the server names it: lower-case words joined by dots, optionally indexed,
# followed by ": ", e.g. "model.n_heads: must divide model.d_model" or
# "parallel.stage_layers[2]: ...". It is taken at the start of the message or after an earlier
# "...: " prefix (the method, or the spec's origin).
_FIELD = re.compile(r"(?:^|: )([a-z][a-z0-9_]*(?:\[\d+\])?(?:\.[a-z][a-z0-9_]*(?:\[\d+\])?)*): ")
# JobSpec's top-level fields (proto/pp/v1/job.proto): a bare word counts only when it is one.
_TOP_LEVEL = {
    "name", "model", "parallel", "train", "data", "checkpoint", "max_restarts", "eval", "priority",
    "preemptible", "elastic",
}


def spec_field(message: str) -> Optional[str]:
    """The job spec field an INVALID_ARGUMENT message names (``"train.lr"``), or None."""
    for match in _FIELD.finditer(message or ""):
        field = match.group(1)
        if "." in field or re.sub(r"\[\d+\]$", "", field) in _TOP_LEVEL:
            return field
    return None
