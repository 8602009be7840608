"""A Python grpcio client submits and watches a job on a secure `ppctl up` cluster.

Starts `ppctl up --workers=2` with a one-worker job long enough to outlast the check (ppctl up stops
its cluster when its own job ends), reads the "reach it:" line for the coordinator, CA and token
file, runs grpc_client.py against them (its small job takes the other worker), then stops ppctl up
with SIGTERM as a user's Ctrl-C would and checks that it exits.

Usage: check_python_client.py --repo DIR --ppctl PATH
Exit 0 ok, 1 on a failure, 77 (skip) while ppctl is not built.
"""

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import deploylib

STARTUP_TIMEOUT_S = 90
CLIENT_TIMEOUT_S = 240
STOP_TIMEOUT_S = 30

# Occupies one worker for far longer than the check needs.
LONG_SPEC = {
    "name": "holder",
    "model": {"vocabSize": 256, "seqLen": 32, "dModel": 32, "nHeads": 2, "nLayers": 2},
    "parallel": {"pipeline": 1, "schedule": "1f1b"},
    "train": {"steps": 100000, "microbatches": 2, "microbatchSize": 2, "lr": 0.01, "seed": 1},
    "data": {"format": "generated", "generatedTokens": 4096, "generatedSeed": 3},
}


def wait_for_reach_line(ppctl, output):
    """{flag: value} of the "reach it: ppctl ..." line ppctl up prints once the cluster serves."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        with open(output, encoding="utf-8", errors="replace") as f:
            m = re.search(r"^reach it: (.*)$", f.read(), re.M)
        if m:
            args = shlex.split(m.group(1))
            return {deploylib.flag_name(x): x.partition("=")[2] for x in args if "=" in x}
        if ppctl.poll() is not None:
            break
        time.sleep(0.1)
    return None


def stop(ppctl):
    """SIGTERM to ppctl up (it stops its daemons); SIGKILL to its process group if it hangs."""
    if ppctl.poll() is None:
        ppctl.send_signal(signal.SIGTERM)
    try:
        ppctl.wait(timeout=STOP_TIMEOUT_S)
        return True
    except subprocess.TimeoutExpired:
        os.killpg(ppctl.pid, signal.SIGKILL)
        ppctl.wait()
        return False


def run(problems, repo, ppctl_path, work):
    spec = os.path.join(work, "holder.json")
    with open(spec, "w", encoding="utf-8") as f:
        json.dump(LONG_SPEC, f)
    output = os.path.join(work, "ppctl-up.txt")
    with open(output, "w", encoding="utf-8") as out:
        ppctl = subprocess.Popen(
            [ppctl_path, "up", "--workers=2", f"--job={spec}", f"--data_dir={work}/data"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        reach = wait_for_reach_line(ppctl, output)
        if not reach:
            problems.add("ppctl up", f"no 'reach it:' line within {STARTUP_TIMEOUT_S} s")
            return output
        client = subprocess.run(
            [sys.executable, os.path.join(os.path.dirname(__file__), "grpc_client.py"),
             f"--repo={repo}", f"--coordinator={reach['coordinator']}",
             f"--ca={reach['ca']}", f"--token_file={reach['token_file']}"],
            capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
        )
        sys.stdout.write(client.stdout)
        if client.returncode != 0:
            problems.add("grpc_client", (client.stdout + client.stderr).strip()[-2000:])
        if ppctl.poll() is not None:
            problems.add("ppctl up", f"exited ({ppctl.returncode}) while the client ran")
    finally:
        if not stop(ppctl):
            problems.add("ppctl up", f"still running {STOP_TIMEOUT_S} s after SIGTERM")
    return output


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--ppctl", required=True)
    a = parser.parse_args()
    if not os.access(a.ppctl, os.X_OK):
        print(f"check_python_client: skip: {a.ppctl} is not built yet")
        sys.exit(deploylib.SKIP)
    problems = deploylib.Problems("check_python_client")
    with tempfile.TemporaryDirectory(prefix="pp-python-client-") as work:
        output = run(problems, a.repo, a.ppctl, work)
        if problems.items:
            with open(output, encoding="utf-8", errors="replace") as f:
                sys.stdout.write("ppctl up output (tail):\n" + f.read()[-3000:])
    problems.finish("grpcio client with the CA and a bearer token on ppctl up")


if __name__ == "__main__":
    main()
