"""bench/peer: our trainer and pipeline next to PyTorch's on the same model, shapes and threads.

Case (a), one process: `ppctl train` against torch_train.py, 6 layers C=256 T=128 4 heads, 4 x 8
sequences per step, at each of --threads. Case (b), a pipeline of D=2: `ppctl up --workers=2` on the
embedded default model (4 layers C=128 T=128, M=8 microbatches of 4 sequences, cost partition)
against torch_pipe.py (torch.distributed.pipelining, gloo, 2 processes, 1 thread each), for each of
--schedules. Runs alternate, ours then torch, --repeats times; each figure is printed as it comes,
then the medians, their ratio (ours / torch) and the spread of each side ((max - min) / median).
Pure standard library: PyTorch runs in --python (scripts/test-venv.sh --torch). README.md beside
this file says what each side does.
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = "/usr/share/common-licenses/GPL-3"
LN_VOCAB = math.log(256)
SANITY = 0.25  # both sides' first loss must lie within this of ln(256)
GAP_GOAL = 3.0  # points: measured idle against the idle simulated from the measured costs
# Schedules torch_pipe.py has a class for; the others (zb-h1) run on our side alone.
TORCH_SCHEDULES = ("1f1b", "interleaved-1f1b", "zb-v")
TWO_CHUNKS = ("interleaved-1f1b", "zb-v", "v-half", "v-min", "dualpipe-v")  # V=2; others V=1


def run(cmd, timeout):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        sys.exit(f"peer_bench: {' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return proc.stdout


def torch_result(out):
    line = next(line for line in reversed(out.splitlines()) if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def single_spec(path, steps):
    spec = {"name": "peer-single",
            "model": {"vocabSize": 256, "seqLen": 128, "dModel": 256, "nHeads": 4, "nLayers": 6},
            "parallel": {"pipeline": 1, "schedule": "1f1b"},
            "train": {"steps": steps, "microbatches": 4, "microbatchSize": 8, "lr": 1e-3,
                      "weightDecay": 0.1, "gradClip": 1.0, "seed": 1},
            "data": {"path": CORPUS}}
    with open(path, "w") as f:
        json.dump(spec, f)


def pipe_spec(path, schedule, steps):
    parallel = {"pipeline": 2, "schedule": schedule, "partition": "cost"}
    if schedule in TWO_CHUNKS:
        parallel["chunks"] = 2
    spec = {"name": "peer-pipe",
            "model": {"vocabSize": 256, "seqLen": 128, "dModel": 128, "nHeads": 4, "nLayers": 4},
            "parallel": parallel,
            "train": {"steps": steps, "microbatches": 8, "microbatchSize": 4, "lr": 2e-3,
                      "weightDecay": 0.1, "gradClip": 1.0, "seed": 1},
            "data": {"path": CORPUS}}
    with open(path, "w") as f:
        json.dump(spec, f)


STEP_LINE = re.compile(r"^step (\d+)/\d+ loss ([-\d.]+) .* ([\d.]+) tok/s$")


def ours_single(a, spec, threads, warmup=2):
    out = run([a.ppctl, "train", spec, f"--threads={threads}"], a.timeout)
    steps = [(int(m[1]), float(m[2]), float(m[3]))
             for m in map(STEP_LINE.match, out.splitlines()) if m]
    timed = [tok for step, _, tok in steps if step > warmup] or [steps[-1][2]]
    return {"tok_s": statistics.median(timed), "first_loss": steps[0][1]}


def ours_pipe(a, spec, work):
    out = run([a.ppctl, "up", "--workers=2", f"--job={spec}", f"--data_dir={work}"], a.timeout)

    def grab(pattern):
        m = re.search(pattern, out, re.M)
        if not m:
            sys.exit(f"peer_bench: no '{pattern}' in the output of ppctl up:\n{out[-3000:]}")
        return float(m[1])

    return {"tok_s": grab(r"^\s+tokens/s\s+([\d.]+)"),
            "first_loss": grab(r"^\s+loss\s+([\d.]+) at step 1 "),
            "idle_steps": grab(r"^\s+measured\s+([\d.]+)%"),
            "sim_planned": grab(r"^\s+simulated\s+([\d.]+)% \(\S+ D="),
            "idle": grab(r"^\s+traced\s+([\d.]+)%"),
            "sim_measured": grab(r"^\s+simulated\s+([\d.]+)% \(median of the same steps")}


def stage_units(a, spec):
    plan = json.loads(run([a.ppctl, "plan", f"--spec={spec}", "--format=json"], a.timeout))
    return ",".join(str(u) for u in plan["stageLayers"])


def spread(values):
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def summarise(title, ours, theirs):
    mo = statistics.median(r["tok_s"] for r in ours)
    mt = statistics.median(r["tok_s"] for r in theirs) if theirs else None
    versus = (f"torch {mt:.0f} tok/s  ratio {mo / mt:.2f}x  " if mt else "")
    print(f"  median  ours {mo:.0f} tok/s  {versus}"
          f"spread ours {100 * spread([r['tok_s'] for r in ours]):.1f}%"
          + (f" torch {100 * spread([r['tok_s'] for r in theirs]):.1f}%" if theirs else ""))
    if "idle" in ours[0]:
        med = {k: statistics.median(r[k] for r in ours)
               for k in ("idle", "sim_measured", "sim_planned", "idle_steps")}
        print(f"  ours idle (traced steps): measured {med['idle']:.1f}%, simulated "
              f"{med['sim_measured']:.1f}% (each step's measured costs): gap "
              f"{med['idle'] - med['sim_measured']:+.1f} points; planned {med['sim_planned']:.1f}% "
              f"(F=1 B=2); whole steps with the optimizer {med['idle_steps']:.1f}%")
    return {"case": title, "ours": mo, "torch": mt, "ratio": mo / mt if mt else None,
            "gap": med["idle"] - med["sim_measured"] if "idle" in ours[0] else None}


def sane(result):
    return abs(result["first_loss"] - LN_VOCAB) <= SANITY


def case(a, title, ours_fn, torch_cmd):
    """torch_cmd None: a schedule torch has no class for; ours runs alone."""
    print(f"{title}", flush=True)
    ours, theirs = [], []
    for rep in range(1, a.repeats + 1):
        ours.append(ours_fn())
        if torch_cmd:
            theirs.append(torch_result(run(torch_cmd, a.timeout)))
        extra = (f"  idle {ours[-1]['idle']:.1f}% (sim {ours[-1]['sim_measured']:.1f}%)"
                 if "idle" in ours[-1] else "")
        other = (f"  torch {theirs[-1]['tok_s']:7.0f} tok/s (loss 1 {theirs[-1]['first_loss']:.4f})"
                 if theirs else "  (torch has no such schedule class)")
        print(f"  run {rep}  ours {ours[-1]['tok_s']:7.0f} tok/s (loss 1 {ours[-1]['first_loss']:.4f})"
              f"{extra}{other}", flush=True)
    row = summarise(title, ours, theirs)
    row["sane"] = all(map(sane, ours + theirs))
    if not row["sane"]:
        print(f"  SANITY: a first loss is more than {SANITY} from ln(256) = {LN_VOCAB:.4f}")
    return row, theirs[0] if theirs else None


def single_cases(a, work):
    spec = os.path.join(work, "single.json")
    single_spec(spec, a.single_steps)
    rows = []
    for threads in a.threads:
        torch_cmd = [a.python, os.path.join(HERE, "torch_train.py"), f"--threads={threads}",
                     f"--steps={a.single_steps}", f"--attention={a.attention}",
                     f"--adamw={a.adamw}", f"--data={CORPUS}"]
        title = (f"(a) one process, 6 layers C=256 T=128, 4 x 8 sequences per step, "
                 f"{threads} thread{'s' if threads > 1 else ''}")
        rows.append(case(a, title, lambda: ours_single(a, spec, threads), torch_cmd))
    return rows


def pipe_cases(a, work):
    rows = []
    for schedule in a.schedules:
        spec = os.path.join(work, f"pipe-{schedule}.json")
        pipe_spec(spec, schedule, a.pipe_steps)
        units = stage_units(a, spec)
        torch_cmd = [a.python, os.path.join(HERE, "torch_pipe.py"), f"--schedule={schedule}",
                     f"--stage_units={units}", f"--steps={a.pipe_steps}",
                     f"--attention={a.attention}", f"--adamw={a.adamw}", f"--data={CORPUS}"]
        if schedule not in TORCH_SCHEDULES:
            torch_cmd = None
        title = (f"(b) pipeline D=2 M=8, 4 layers C=128 T=128, {schedule}, stage units {units}")
        counter = iter(range(1, 1000))
        rows.append(case(a, title, lambda: ours_pipe(
            a, spec, os.path.join(work, f"up-{schedule}-{next(counter)}")), torch_cmd))
    return rows


def parse():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ppctl", default="build/bin/ppctl")
    p.add_argument("--python", default="build/venv-hf/bin/python", help="a Python with torch")
    p.add_argument("--part", choices=["single", "pipe", "all"], default="all")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=lambda s: [int(t) for t in s.split(",")], default=[1, 2])
    p.add_argument("--schedules", type=lambda s: s.split(","),
                   default=["1f1b", "interleaved-1f1b", "zb-h1", "zb-v"])
    p.add_argument("--single_steps", type=int, default=8, help="steps per run; 2 warm-up")
    p.add_argument("--pipe_steps", type=int, default=30)
    p.add_argument("--attention", choices=["sdpa", "manual"], default="sdpa")
    p.add_argument("--adamw", choices=["default", "foreach", "fused"], default="default")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run")
    return p.parse_args()


def main():
    a = parse()
    if not os.path.exists(CORPUS):
        sys.exit(f"peer_bench: needs {CORPUS} (Debian's base-files)")
    with tempfile.TemporaryDirectory(prefix="peer-bench-") as work:
        rows = []
        if a.part in ("single", "all"):
            rows += single_cases(a, work)
        if a.part in ("pipe", "all"):
            rows += pipe_cases(a, work)
    first_torch = next(torch for _, torch in rows if torch)
    print(f"torch {first_torch['torch']}, {a.attention} attention, AdamW {a.adamw}; "
          f"ratio = our median tokens/s over torch's (goal >= 1.3x)")
    for row, _ in rows:
        gap = (f"  idle gap {row['gap']:+.1f} points (goal within {GAP_GOAL:.0f})"
               if row.get("gap") is not None else "")
        ratio = f"{row['ratio']:.2f}x" if row["ratio"] else "  -  "
        print(f"  {ratio}  {row['case']}{gap}")
    return 0 if all(row["sane"] for row, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
