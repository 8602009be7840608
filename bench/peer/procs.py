"""bench/peer's child processes: run one and take its stdout or the first line of why it failed,
and read a torch script's `RESULT {json}` line."""
import json
import re
import subprocess
import sys


class Failed(Exception):
    """A run that may fail (torch.compile) did; the message is its reason's first line."""


def reason(proc, timeout):
    """The first line of why a run failed: the last `SomeError: ...` line of its stderr (Python
    prints the exception last), else its last line."""
    if proc is None:
        return f"timed out after {timeout:.0f} s"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b", line)]
    return (errors or lines or [f"exit {proc.returncode}"])[-1][:200]


def run(cmd, timeout, may_fail=False):
    """cmd's stdout. A failure ends the bench, or with may_fail raises Failed."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc = None
    if proc is not None and proc.returncode == 0:
        return proc.stdout
    if may_fail:
        raise Failed(reason(proc, timeout))
    tail = proc.stderr[-2000:] if proc is not None else ""
    sys.exit(f"peer_bench: {' '.join(cmd)}: {reason(proc, timeout)}\n{tail}")


def torch_result(out):
    line = next(line for line in reversed(out.splitlines()) if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])
