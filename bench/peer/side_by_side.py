"""Two one-thread training runs at once, each pinned to a core of its own (peer_bench.py
--side_by_side).

Runs one after the other see the host at different minutes, and on a shared VM the host moves
more than the ratio being measured: the same product took 6.7-9.3 ms one minute and 19.6-25.5 ms
the next (bench/NOTES.md, 2026-12-06). Two runs at once see the same minutes. Each side's step
lines are timed as they arrive, and a step counts only if it ran while both sides were training:
it began after both had ended their first step (compilation, first touches) and ended before the
pair stopped; the warm-up steps never count. Both sides are given more steps than they need and
are stopped together once each has enough counted steps. What the two sides then share (the
last-level cache, the memory bandwidth) is what two tenants of one server share, so this is a
second measurement beside the alternating one, not the same one with less noise.
"""
import os
import re
import statistics
import subprocess
import sys
import threading
import time

# The two cores the pairs run on; empty where fewer than two are ours.
CORES = sorted(os.sched_getaffinity(0))[:2] if len(os.sched_getaffinity(0)) >= 2 else []

# Both trainers' step lines, ppctl train's and torch_train.py's: step, loss, seconds, tok/s.
STEP = re.compile(r"^step (\d+)/\d+ loss ([-\d.]+) .*?([\d.]+) s ([\d.]+) tok/s$")


class Side:
    """One run pinned to `cpu`: its step lines with their arrival times, its stderr's tail."""

    def __init__(self, cmd, cpu):
        self.steps = []  # (arrival, step, loss, seconds, tok/s)
        self.stderr = ""
        # taskset (util-linux) pins it before exec: a preexec_fn is unsafe beside the first
        # side's reader threads.
        self.proc = subprocess.Popen(["taskset", "-c", str(cpu)] + cmd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.readers = [threading.Thread(target=self._read_stdout),
                        threading.Thread(target=self._read_stderr)]
        for reader in self.readers:
            reader.start()

    def _read_stdout(self):
        for line in self.proc.stdout:
            m = STEP.match(line.strip())
            if m:
                self.steps.append((time.monotonic(), int(m[1]), float(m[2]), float(m[3]),
                                   float(m[4])))

    def _read_stderr(self):
        self.stderr = self.proc.stderr.read()[-2000:]

    def running(self):
        return self.proc.poll() is None

    def stop(self):
        """Ends the run (killed if still running); its exit code, None when it was killed."""
        code = self.proc.poll()
        if code is None:
            self.proc.kill()
            self.proc.wait()
        for reader in self.readers:
            reader.join()
        return code


def counted(side, start, end, warmup):
    """tok/s of the steps past the warm-up that began at or after start and ended by end."""
    return [tok for arrival, step, _, seconds, tok in side.steps
            if step > warmup and arrival - seconds >= start and arrival <= end]


def run_pair(cmds, cpus, timeout, warmup, wanted):
    """cmds and cpus: {name: command} and {name: cpu}, two names; each command trains more steps
    than it will need. Starts both at once and stops both when each has `wanted` steps that ran
    while both trained (or when one ends by itself: the window closes at its last step). Returns
    ({name: {"tok_s", "first_loss", "counted"}}, None), or (None, why) when a run failed, timed
    out, or had no step in the window."""
    sides = {name: Side(cmd, cpus[name]) for name, cmd in cmds.items()}
    deadline = time.monotonic() + timeout
    start = end = None
    while end is None:
        time.sleep(0.1)
        now = time.monotonic()
        if all(side.steps for side in sides.values()):
            start = max(side.steps[0][0] for side in sides.values())
            if all(len(counted(side, start, now, warmup)) >= wanted for side in sides.values()):
                end = now
        ended = [side for side in sides.values() if not side.running()]
        if ended and all(side.proc.returncode == 0 and side.steps for side in ended):
            end = min(side.steps[-1][0] for side in ended)
        elif ended or now > deadline:
            break
    codes = {name: side.stop() for name, side in sides.items()}
    for name, code in codes.items():
        if end is None and code != 0:  # a failure, not our kill; or the deadline passed
            why = f"exit {code}" if code is not None else f"timed out after {timeout:.0f} s"
            return None, f"{name}: {why}: {sides[name].stderr.strip()[-300:]}"
    if end is None or start is None:
        return None, "a side printed no step line"
    results = {}
    for name, side in sides.items():
        steps = counted(side, start, end, warmup)
        if not steps:
            return None, f"{name}: no step past the warm-up ran while both trained"
        results[name] = {"tok_s": statistics.median(steps), "first_loss": side.steps[0][2],
                         "counted": len(steps)}
    return results, None


def repeat(a, title, cmds):
    """a.repeats runs of the two cmds at once on CORES (peer_bench's flags a), the cores
    swapped every other run, each line printed as it comes: {name: [result of each run]}."""
    runs = {name: [] for name in cmds}
    for rep in range(1, a.repeats + 1):
        cpus = dict(zip(cmds, CORES if rep % 2 == 1 else CORES[::-1]))
        results, why = run_pair(cmds, cpus, a.timeout, warmup=2, wanted=max(1, a.single_steps - 2))
        if results is None:
            sys.exit(f"peer_bench: {title}: {why}")
        line = f"  run {rep}"
        for name, result in results.items():
            runs[name].append(result)
            line += (f"  {name} {result['tok_s']:7.0f} tok/s (core {cpus[name]}, "
                     f"{result['counted']} steps, loss 1 {result['first_loss']:.4f})")
        print(line, flush=True)
    return runs


def noise_floor(a, case, cmd):
    """Our run against itself at once on CORES (A/A) at `case`: the range of its run-by-run
    ratios is what the host alone does to a side-by-side ratio, as text for the report."""
    title = f"A/A: ours against ours at once, {case}, 1 thread each"
    print(title, flush=True)
    runs = repeat(a, title, {"ours": cmd, "again": cmd})
    ratios = [x["tok_s"] / y["tok_s"] for x, y in zip(runs["ours"], runs["again"])]
    return f"{min(ratios):.2f}-{max(ratios):.2f}x ({title})"
