"""A job API client in Python (grpcio), as a user outside the C++ tree would write one.

Stubs are generated from proto/ with grpcio-tools at run time; the channel uses TLS with the
cluster's CA and sends the token as `authorization: Bearer TOKEN` metadata.

Usage: grpc_client.py --repo DIR --coordinator HOST:PORT --ca PEM --token_file FILE
  Checks that a call without a token is UNAUTHENTICATED, then submits a small job, watches it to
  FINISHED and checks it SUCCEEDED under the token's user. Exit 0 on success, 1 with one line.
"""

import argparse
import os
import sys
import tempfile

import grpc
from grpc_tools import protoc

RPC_TIMEOUT_S = 10
WATCH_TIMEOUT_S = 120

# One CPU worker, a few steps of a tiny model on generated tokens: seconds on a busy core.
SMALL_SPEC = {
    "name": "python-client",
    "model": {"vocab_size": 256, "seq_len": 32, "d_model": 32, "n_heads": 2, "n_layers": 2},
    "parallel": {"pipeline": 1, "schedule": "1f1b"},
    "train": {"steps": 5, "microbatches": 2, "microbatch_size": 2, "lr": 0.01, "seed": 1},
    "data": {"format": "generated", "generated_tokens": 4096, "generated_seed": 3},
}


def load_stubs(repo, out_dir):
    """Generates pp/v1/*_pb2*.py from repo/proto into out_dir and imports the coordinator's."""
    proto_dir = os.path.join(repo, "proto")
    files = sorted(
        os.path.join("pp", "v1", f)
        for f in os.listdir(os.path.join(proto_dir, "pp", "v1"))
        if f.endswith(".proto")
    )
    code = protoc.main(
        ["protoc", f"-I{proto_dir}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}"]
        + files
    )
    if code != 0:
        raise SystemExit(f"grpc_client: protoc failed on {proto_dir} (exit {code})")
    sys.path.insert(0, out_dir)
    from pp.v1 import coordinator_pb2, coordinator_pb2_grpc, job_pb2  # noqa: E402

    return coordinator_pb2, coordinator_pb2_grpc, job_pb2


def fail(message):
    print(f"grpc_client: FAIL {message}")
    sys.exit(1)


def check_unauthenticated(stub, pb):
    try:
        stub.ListJobs(pb.ListJobsRequest(), timeout=RPC_TIMEOUT_S)
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.UNAUTHENTICATED:
            fail(f"ListJobs without a token: {e.code().name} {e.details()}, want UNAUTHENTICATED")
        return
    fail("ListJobs without a token succeeded")


def watch_to_finish(stub, pb, job_id, metadata):
    """The last event of WatchJob(job_id): it must be EVENT_FINISHED within WATCH_TIMEOUT_S."""
    kinds = []
    for event in stub.WatchJob(
        pb.WatchJobRequest(job_id=job_id), metadata=metadata, timeout=WATCH_TIMEOUT_S
    ):
        kinds.append(pb.JobEventKind.Name(event.kind))
        if event.kind in (pb.EVENT_FINISHED, pb.EVENT_FAILED, pb.EVENT_CANCELLED):
            if event.kind != pb.EVENT_FINISHED:
                fail(f"job {job_id} ended with {kinds[-1]}: {event.message}")
            return kinds
    fail(f"WatchJob({job_id}) ended before the job did; events {kinds}")


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--repo", "--coordinator", "--ca", "--token_file"):
        parser.add_argument(flag, required=True)
    a = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pp-grpc-client-") as gen:
        pb, pb_grpc, job_pb = load_stubs(a.repo, gen)
        with open(a.ca, "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        with open(a.token_file, encoding="utf-8") as f:
            metadata = (("authorization", f"Bearer {f.read().strip()}"),)
        with grpc.secure_channel(a.coordinator, credentials) as channel:
            stub = pb_grpc.CoordinatorStub(channel)
            check_unauthenticated(stub, pb)
            from google.protobuf import json_format

            spec = json_format.ParseDict(SMALL_SPEC, job_pb.JobSpec())
            try:
                job_id = stub.SubmitJob(
                    pb.SubmitJobRequest(spec=spec), metadata=metadata, timeout=RPC_TIMEOUT_S
                ).job_id
                kinds = watch_to_finish(stub, pb, job_id, metadata)
                job = stub.GetJob(
                    pb.GetJobRequest(job_id=job_id), metadata=metadata, timeout=RPC_TIMEOUT_S
                )
            except grpc.RpcError as e:
                fail(f"{e.code().name}: {e.details()}")
    if job_pb.JobState.Name(job.state) != "SUCCEEDED" or job.step != SMALL_SPEC["train"]["steps"]:
        fail(f"job {job_id}: {job_pb.JobState.Name(job.state)} at step {job.step}: {job.reason}")
    if not job.owner:
        fail(f"job {job_id} has no owner")
    print(f"grpc_client: ok (job {job_id} of {job.owner}: {' '.join(kinds)})")


if __name__ == "__main__":
    main()
