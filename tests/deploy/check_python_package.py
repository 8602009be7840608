"""The Python package pipeline-client (client/python), installed into a fresh venv, on a secure
`ppctl up` cluster: its README example and its tests.

Run with the python of that venv (scripts/python-client-venv.sh makes it: `pip install
./client/python[tensorboard,pandas]`, pinned). Starts `ppctl up --workers=2 --view_token` with a
one-worker job long enough to outlast the check (ppctl up stops its cluster when its own job ends),
reads the "reach it:" and "view token:" lines, then
1. runs client/python/examples/quickstart.py (the README's Python example) against it: the job
   SUCCEEDED, 20 history rows, its workers' log lines, a TensorBoard event file; and
   examples/notebook.py (the cell-by-cell tour) to its end;
2. runs the package's tests (client/python/tests, unittest) with PP_ADDRESS, PP_CA,
   PP_TOKEN_FILE and PP_VIEW_TOKEN_FILE set: offline ones against a fake server, and
   test_cluster.py against the cluster (a call without a token, a bad spec, a view token, a
   watched job and its owner, list pages, a 10,000-step job's history pages and TensorBoard
   scalars read back, logs),
then stops ppctl up with SIGTERM as a user's Ctrl-C would and checks that it exits.

Usage: check_python_package.py --repo DIR --ppctl PATH
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

from deploylib import SKIP, Problems, flag_name

STARTUP_TIMEOUT_S = 90
QUICKSTART_TIMEOUT_S = 200
TESTS_TIMEOUT_S = 400
STOP_TIMEOUT_S = 30

# Occupies one worker for far longer than the check needs (about an hour on a free core).
LONG_SPEC = {
    "name": "holder",
    "model": {"vocabSize": 256, "seqLen": 32, "dModel": 32, "nHeads": 2, "nLayers": 2},
    "parallel": {"pipeline": 1, "schedule": "1f1b"},
    "train": {"steps": 1000000, "microbatches": 2, "microbatchSize": 2, "lr": 0.01, "seed": 1},
    "data": {"format": "generated", "generatedTokens": 4096, "generatedSeed": 3},
}


def wait_for_lines(ppctl, output):
    """({flag: value} of the "reach it: ppctl ..." line, the view token file) once printed."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        with open(output, encoding="utf-8", errors="replace") as f:
            text = f.read()
        reach = re.search(r"^reach it: (.*)$", text, re.M)
        view = re.search(r"^view token: (.*)$", text, re.M)
        if reach and view:
            args = shlex.split(reach.group(1))
            flags = {flag_name(x): x.partition("=")[2] for x in args if "=" in x}
            return flags, view.group(1).strip()
        if ppctl.poll() is not None:
            break
        time.sleep(0.1)
    return None, None


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


def check_readme_example(problems, repo):
    """README.md's Python block is quickstart.py's code (all but its docstring), line for line."""
    with open(os.path.join(repo, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"^```python\n(.*?)^```$", f.read(), re.M | re.S)
    with open(os.path.join(repo, "client", "python", "examples", "quickstart.py"),
              encoding="utf-8") as f:
        code = re.sub(r'^""".*?"""\n', "", f.read(), count=1, flags=re.S)
    if code not in blocks:
        problems.add("README.md", "its ```python block is not examples/quickstart.py's code")


def check_quickstart(problems, repo, reach, work):
    logdir = os.path.join(work, "tensorboard")
    start = time.monotonic()
    try:
        run = subprocess.run(
            [sys.executable, os.path.join(repo, "client", "python", "examples", "quickstart.py"),
             reach["coordinator"], reach["ca"], reach["token_file"], logdir],
            capture_output=True, text=True, timeout=QUICKSTART_TIMEOUT_S, cwd=work,
        )
    except subprocess.TimeoutExpired:
        problems.add("quickstart.py", f"still running after {QUICKSTART_TIMEOUT_S} s")
        return
    out = run.stdout
    print(f"quickstart.py ({time.monotonic() - start:.1f} s), output:")
    sys.stdout.write("".join(f"  {line}\n" for line in out.splitlines()))
    if run.returncode != 0:
        problems.add("quickstart.py", f"exit {run.returncode}: {(out + run.stderr)[-2000:]}")
        return
    if not re.search(r"^quickstart-\d+ SUCCEEDED$", out, re.M):
        problems.add("quickstart.py", "no line '<job> SUCCEEDED'")
    steps = re.findall(r"^step +(\d+) +loss ([0-9.]+) +lr ", out, re.M)
    if [int(s) for s, _ in steps] != list(range(1, 21)):
        problems.add("quickstart.py", f"history rows for steps {[s for s, _ in steps]}, want 1..20")
    if not re.search(r"^\[w\d+ rank 0\] .*step 20/20", out, re.M):
        problems.add("quickstart.py", "no worker log line of step 20/20")
    event_file = re.search(r"^tensorboard scalars: (.*)$", out, re.M)
    if not event_file or not os.path.isfile(event_file.group(1)):
        problems.add("quickstart.py", "no TensorBoard event file written")
    elif not event_file.group(1).startswith(logdir):
        problems.add("quickstart.py", f"event file {event_file.group(1)} is not under {logdir}")


def check_notebook(problems, repo, reach, work):
    """examples/notebook.py, the cell-by-cell tour, run whole as a script."""
    env = dict(os.environ, PP_ADDRESS=reach["coordinator"], PP_CA=reach["ca"],
               PP_TOKEN_FILE=reach["token_file"], TMPDIR=work)
    start = time.monotonic()
    try:
        run = subprocess.run(
            [sys.executable, os.path.join(repo, "client", "python", "examples", "notebook.py")],
            capture_output=True, text=True, timeout=QUICKSTART_TIMEOUT_S, cwd=work, env=env,
        )
    except subprocess.TimeoutExpired:
        problems.add("notebook.py", f"still running after {QUICKSTART_TIMEOUT_S} s")
        return
    print(f"notebook.py ({time.monotonic() - start:.1f} s): exit {run.returncode}")
    if run.returncode != 0:
        problems.add("notebook.py", f"exit {run.returncode}: {(run.stdout + run.stderr)[-2000:]}")
        return
    for want in ("refused: model.n_heads", "\nSUCCEEDED\n", "EVENT_FINISHED", "task ended: ok"):
        if want not in run.stdout:
            problems.add("notebook.py", f"no {want.strip()!r} in its output")


def check_package_tests(problems, repo, reach, view_token_file):
    env = dict(os.environ, PP_ADDRESS=reach["coordinator"], PP_CA=reach["ca"],
               PP_TOKEN_FILE=reach["token_file"], PP_VIEW_TOKEN_FILE=view_token_file)
    tests = os.path.join(repo, "client", "python", "tests")
    start = time.monotonic()
    try:
        run = subprocess.run(
            [sys.executable, "-m", "unittest", "discover", "-v", "-s", tests, "-t", tests],
            capture_output=True, text=True, timeout=TESTS_TIMEOUT_S, env=env,
        )
    except subprocess.TimeoutExpired as e:
        problems.add("client/python/tests", f"still running after {TESTS_TIMEOUT_S} s")
        sys.stdout.write(str(e.stderr or "")[-3000:])
        return
    print(f"client/python/tests ({time.monotonic() - start:.1f} s):")
    sys.stdout.write(run.stdout + run.stderr)
    if run.returncode != 0:
        problems.add("client/python/tests", f"unittest exit {run.returncode}")
    elif "skipped" in run.stderr.splitlines()[-1]:
        # On a cluster with GetJobLogs and tensorboard installed, nothing may be skipped.
        problems.add("client/python/tests", "tests were skipped: " + run.stderr.splitlines()[-1])


def die_with_parent():
    """In ppctl up's child before exec: SIGTERM when this check dies (a ctest timeout's kill),
    so that ppctl up stops its cluster rather than train the holder for an hour."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run(problems, repo, ppctl_path, work):
    spec = os.path.join(work, "holder.json")
    with open(spec, "w", encoding="utf-8") as f:
        json.dump(LONG_SPEC, f)
    output = os.path.join(work, "ppctl-up.txt")
    with open(output, "w", encoding="utf-8") as out:
        ppctl = subprocess.Popen(
            [ppctl_path, "up", "--workers=2", "--view_token", f"--job={spec}",
             f"--data_dir={work}/data"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent,
        )
    try:
        reach, view_token_file = wait_for_lines(ppctl, output)
        if not reach:
            problems.add("ppctl up", f"no 'reach it:' and 'view token:' lines within "
                                     f"{STARTUP_TIMEOUT_S} s")
            return output
        check_quickstart(problems, repo, reach, work)
        check_notebook(problems, repo, reach, work)
        check_package_tests(problems, repo, reach, view_token_file)
        if ppctl.poll() is not None:
            problems.add("ppctl up", f"exited ({ppctl.returncode}) while the checks ran")
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
        print(f"check_python_package: skip: {a.ppctl} is not built yet")
        sys.exit(SKIP)
    problems = Problems("check_python_package")
    check_readme_example(problems, a.repo)
    with tempfile.TemporaryDirectory(prefix="pp-python-package-") as work:
        output = run(problems, a.repo, a.ppctl, work)
        if problems.items:
            with open(output, encoding="utf-8", errors="replace") as f:
                sys.stdout.write("ppctl up output (tail):\n" + f.read()[-3000:])
    problems.finish("pipeline-client from a fresh venv on ppctl up: quickstart and package tests")


if __name__ == "__main__":
    main()
