"""bench/peer: our trainer and pipeline next to PyTorch's on the same model, shapes and threads.

One process: `ppctl train` against torch_train.py (eager, and torch.compile beside it) at each of
--shapes, --precision and --threads:
  (a) 6 layers C=256 T=128 4 heads, 4 x 8 sequences per step;
  (b) 12 layers C=768 T=256 12 heads (GPT-2 small's width, byte vocabulary), 2 x 2 sequences;
  (c) 12 layers C=768 T=1024 12 heads, 1 x 1 sequence (long context: attention matters).
A pipeline of D=2: `ppctl up --workers=2` on the embedded default model (4 layers C=128 T=128, M=8
microbatches of 4 sequences, cost partition) against torch_pipe.py (torch.distributed.pipelining,
gloo, 2 processes, 1 thread each), for each of --schedules and --precision. Runs alternate in
ABBA order (ours, torch, torch.compile; torch, torch.compile, ours; ...), --repeats times; each
figure is printed as it comes, then the medians as tokens/s, GFLOP/s and share of the GEMM
peak measured beside the case's runs (torch_machine.py), their ratio (ours / torch) with the
range of the run-by-run ratios, and the spread of each side ((max - min) / median); last, the
goals of issue 28 with met / not met and each row's ceiling (the ratio at the whole peak).
--side_by_side adds each 1-thread case run both sides at once, one core each
(side_by_side.py): the same minutes of a shared host for both, informational. Pure standard
library: PyTorch runs in --python. README.md beside this file says
what each side does and how FLOPs are counted.
"""
import argparse
import collections
import json
import math
import os
import re
import statistics
import sys
import tempfile

import side_by_side
from machine import PRECISIONS, case_peak, machine, without_emulated_bf16
from procs import Failed, run, torch_result

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = "/usr/share/common-licenses/GPL-3"
VOCAB = 256
SANITY = 0.25  # both sides' first loss must lie within this of the expected one
GAP_GOAL = 3.0  # points: measured idle against the idle simulated from the measured costs
RATIO_GOAL = 1.3  # ours over torch eager (issue 28)
PEAK_GOALS = {"bf16": 0.35, "fp32": 0.70}  # the step's share of the GEMM peak at shape (b)
# Schedules torch_pipe.py has a class for; the others (zb-h1) run on our side alone.
TORCH_SCHEDULES = ("1f1b", "interleaved-1f1b", "zb-v")
GOAL_SCHEDULES = ("1f1b", "interleaved-1f1b")  # the pipeline rows issue 28 sets the ratio for
TWO_CHUNKS = ("interleaved-1f1b", "zb-v", "v-half", "v-min", "dualpipe-v")  # V=2; others V=1

Shape = collections.namedtuple("Shape", "name layers d_model heads seq_len microbatches batch")
SHAPES = {s.name: s for s in (Shape("a", 6, 256, 4, 128, 4, 8),
                              Shape("b", 12, 768, 12, 256, 2, 2),
                              Shape("c", 12, 768, 12, 1024, 1, 1))}
PIPE = Shape("pipe", 4, 128, 4, 128, 8, 4)  # ppctl up's embedded default model
# What --quick changes; a flag given on the command line wins over either column.
FULL = {"shapes": "a,b,c", "repeats": 3, "single_steps": 8, "pipe_steps": 30, "compile": True}
QUICK = {"shapes": "a", "repeats": 2, "single_steps": 4, "pipe_steps": 10, "compile": False}


def flops_per_token(shape):
    """6 P + 6 L C T: P the matmul parameters (all but the wte and wpe lookups: per block 12 C^2
    weights and 13 C biases and LayerNorm, the final LayerNorm, the head C x vocab), 6 P the
    forward and backward of the products (Kaplan et al. 2020; Chinchilla's 6N), 6 L C T the
    attention's score and value products forward and backward: PaLM's 12 L C T (Chowdhery et al.
    2022, appendix B) halved for the causal mask, whose masked half neither side computes. The
    formula of bench/trainer/trainer_bench.cc."""
    L, C, T = shape.layers, shape.d_model, shape.seq_len
    matmul_params = L * (12 * C * C + 13 * C) + 2 * C + C * VOCAB
    return 6 * matmul_params + 6 * L * C * T


def write_spec(path, shape, parallel, steps, lr, precision):
    spec = {"name": "peer-" + shape.name,
            "model": {"vocabSize": VOCAB, "seqLen": shape.seq_len, "dModel": shape.d_model,
                      "nHeads": shape.heads, "nLayers": shape.layers},
            "parallel": parallel,
            "train": {"steps": steps, "microbatches": shape.microbatches,
                      "microbatchSize": shape.batch, "lr": lr, "weightDecay": 0.1,
                      "gradClip": 1.0, "seed": 1, "precision": precision},
            "data": {"path": CORPUS}}
    with open(path, "w") as f:
        json.dump(spec, f)


def pipe_spec(path, schedule, steps, precision):
    parallel = {"pipeline": 2, "schedule": schedule, "partition": "cost"}
    if schedule in TWO_CHUNKS:
        parallel["chunks"] = 2
    write_spec(path, PIPE, parallel, steps, 2e-3, precision)


def ours_single(a, spec, threads, warmup=2):
    out = run([a.ppctl, "train", spec, f"--threads={threads}"], a.timeout)
    steps = [(int(m[1]), float(m[2]), float(m[4]))
             for m in map(side_by_side.STEP.match, out.splitlines()) if m]
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


def side_line(name, runs, flops, peak):
    """Print one side's median as tokens/s, GFLOP/s and share of the peak; return the median."""
    tok = statistics.median(r["tok_s"] for r in runs)
    gflops = tok * flops / 1e9
    print(f"  {name:8s} {tok:8.0f} tok/s {gflops:7.1f} GFLOP/s {100 * gflops / peak:5.1f}% of "
          f"peak   spread {100 * spread([r['tok_s'] for r in runs]):.1f}% over {len(runs)} runs")
    return tok


def paired_ratios(runs):
    """ours / torch eager of each run (the two ran back to back): their range shows how far the
    machine moved within a case, which the ratio of medians hides. Empty when a side failed."""
    ours, torch = runs["ours"], runs.get("torch", [])
    if not torch or len(torch) != len(ours):
        return []
    return [o["tok_s"] / t["tok_s"] for o, t in zip(ours, torch)]


def summarise(title, runs, failed, flops, peak):
    print(f"  medians (peak {peak:.1f} GFLOP/s, {flops / 1e6:.1f} MFLOP a token):")
    medians = {name: side_line(name, results, flops, peak)
               for name, results in runs.items() if results}
    for name, why in failed.items():
        print(f"  {name}: failed ({why})")
    ratio = medians["ours"] / medians["torch"] if "torch" in medians else None
    versus = medians["ours"] / medians["compile"] if "compile" in medians else None
    pairs = paired_ratios(runs)
    if ratio:
        print(f"  ratio ours / torch {ratio:.2f}x" +
              (f", ours / torch.compile {versus:.2f}x" if versus else "") +
              (f"; run by run {min(pairs):.2f}-{max(pairs):.2f}x" if pairs else ""))
    ours = runs["ours"]
    row = {"case": title, "ratio": ratio, "compile": versus, "compile_failed": "compile" in failed,
           "pairs": pairs, "gflops": {name: tok * flops / 1e9 for name, tok in medians.items()},
           "gap": None}
    if "idle" in ours[0]:
        med = {k: statistics.median(r[k] for r in ours)
               for k in ("idle", "sim_measured", "sim_planned", "idle_steps")}
        print(f"  ours idle (traced steps): measured {med['idle']:.1f}%, simulated "
              f"{med['sim_measured']:.1f}% (each step's measured costs): gap "
              f"{med['idle'] - med['sim_measured']:+.1f} points; planned {med['sim_planned']:.1f}% "
              f"(F=1 B=2); whole steps with the optimizer {med['idle_steps']:.1f}%")
        row["gap"] = med["idle"] - med["sim_measured"]
    return row


def first_loss(shape):
    """The loss an untrained model should start at: the final LayerNorm's unit-variance features
    through N(0, 0.02) head weights give logits of variance 0.02^2 C, and the cross-entropy of
    small Gaussian logits is ln(vocab) + variance / 2 (5.57 at C=128, 5.70 at C=768)."""
    return math.log(VOCAB) + 0.02 ** 2 * shape.d_model / 2


def sane(result, expected):
    return abs(result["first_loss"] - expected) <= SANITY


def run_side(a, name, cmd, failed):
    """One torch run's result, or None after noting in `failed` why torch.compile failed."""
    try:
        return torch_result(run(cmd, a.timeout, may_fail=name == "compile"))
    except Failed as e:
        failed[name] = str(e)
        print(f"  {name}: failed ({e})", flush=True)
        return None


def case(a, title, shape, ours_fn, torch_cmds, peak_fn):
    """torch_cmds: {side name: command}, eager "torch" and maybe "compile"; empty for a schedule
    torch has no class for (ours runs alone). A failed side is not run again. peak_fn() measures
    the GEMM peak before each run; the case's peak is the highest of them."""
    print(title, flush=True)
    runs = {"ours": [], **{name: [] for name in torch_cmds}}
    failed = {}
    peaks = []
    for rep in range(1, a.repeats + 1):
        peaks.append(peak_fn())
        # Ours first in odd runs, last in even ones (ABBA): a machine that drifts one way
        # through a case favours neither side.
        if rep % 2 == 1:
            runs["ours"].append(ours_fn())
        for name, cmd in torch_cmds.items():
            if name not in failed:
                result = run_side(a, name, cmd, failed)
                runs[name] += [result] if result else []
        if rep % 2 == 0:
            runs["ours"].append(ours_fn())
        line = f"  run {rep}"
        for name, results in runs.items():
            if len(results) == rep:
                last = results[-1]
                # A compiled run's first step holds the compilation: say how long it took.
                step1 = f", step 1 {last['first_step_s']:.0f} s" if name == "compile" else ""
                line += (f"  {name} {last['tok_s']:7.0f} tok/s "
                         f"(loss 1 {last['first_loss']:.4f}{step1})")
        if "idle" in runs["ours"][-1]:
            line += (f"  idle {runs['ours'][-1]['idle']:.1f}% "
                     f"(sim {runs['ours'][-1]['sim_measured']:.1f}%)")
        line += f"  peak {peaks[-1]:.0f} GFLOP/s"
        print(line + ("" if torch_cmds else "  (torch has no such schedule class)"), flush=True)
    return checked_row(title, runs, failed, shape, max(peaks))


def checked_row(title, runs, failed, shape, peak):
    """summarise's row, with "sane": every run's first loss near first_loss(shape)."""
    row = summarise(title, runs, failed, flops_per_token(shape), peak)
    row["peak"] = peak
    expected = first_loss(shape)
    row["sane"] = all(sane(r, expected) for results in runs.values() for r in results)
    if not row["sane"]:
        print(f"  SANITY: a first loss is more than {SANITY} from the expected {expected:.4f}")
    return row


def torch_single_cmd(a, shape, precision, threads, compile_it):
    return ([a.python, os.path.join(HERE, "torch_train.py"), f"--threads={threads}",
             f"--layers={shape.layers}", f"--d_model={shape.d_model}", f"--heads={shape.heads}",
             f"--seq_len={shape.seq_len}", f"--microbatches={shape.microbatches}",
             f"--batch={shape.batch}", f"--precision={precision}", f"--steps={a.single_steps}",
             f"--attention={a.attention}", f"--adamw={a.adamw}", f"--data={CORPUS}"]
            + (["--compile"] if compile_it else []))


def single_cases(a, work, peaks):
    """peaks: the header's, for the side-by-side rows; the goal's rows measure their own."""
    rows = []
    for shape in a.shapes:
        for precision in a.precision:
            spec = os.path.join(work, f"single-{shape.name}-{precision}.json")
            write_spec(spec, shape, {"pipeline": 1, "schedule": "1f1b"}, a.single_steps, 1e-3,
                       precision)
            for threads in a.threads:
                cmds = {"torch": torch_single_cmd(a, shape, precision, threads, False)}
                if a.compile:
                    cmds["compile"] = torch_single_cmd(a, shape, precision, threads, True)
                title = (f"({shape.name}) one process, {shape.layers} layers C={shape.d_model} "
                         f"T={shape.seq_len} {shape.heads} heads, {shape.microbatches} x "
                         f"{shape.batch} sequences per step, {precision}, {threads} "
                         f"thread{'s' if threads > 1 else ''}")
                row = case(a, title, shape, lambda: ours_single(a, spec, threads), cmds,
                           lambda: case_peak(a, precision, threads))
                rows.append({**row, "shape": shape.name, "precision": precision,
                             "threads": threads, "goal": True})
                if a.side_by_side and threads == 1:
                    row = pair_case(a, title + ", side by side", shape, precision, work,
                                    peaks[precision][1])
                    if row:
                        rows.append({**row, "shape": shape.name, "precision": precision,
                                     "threads": 1, "goal": False})
    return rows


def pair_case(a, title, shape, precision, work, peak):
    """--side_by_side: ours and torch eager at once, each on a core of its own, the cores
    swapped every other run, until each has --single_steps - 2 steps that ran while both
    trained (side_by_side.py); informational beside the goal's alternating runs. None where
    fewer than two cores are ours."""
    if not side_by_side.CORES:
        print(f"{title}: not run (needs two cores)", flush=True)
        return None
    print(title, flush=True)
    ours, torch = pair_cmds(a, shape, precision, work)
    runs = side_by_side.repeat(a, title, {"ours": ours, "torch": torch})
    return checked_row(title, runs, {}, shape, peak)


def pair_cmds(a, shape, precision, work):
    """Ours and torch eager at one thread, each given more steps than run_pair lets it take."""
    spec = os.path.join(work, f"pair-{shape.name}-{precision}.json")
    steps = 10 * a.single_steps
    write_spec(spec, shape, {"pipeline": 1, "schedule": "1f1b"}, steps, 1e-3, precision)
    return ([a.ppctl, "train", spec, "--threads=1"],
            [arg if not arg.startswith("--steps=") else f"--steps={steps}"
             for arg in torch_single_cmd(a, shape, precision, 1, False)])


def pipe_cases(a, work):
    rows = []
    for schedule in a.schedules:
        for precision in a.precision:
            spec = os.path.join(work, f"pipe-{schedule}-{precision}.json")
            pipe_spec(spec, schedule, a.pipe_steps, precision)
            units = stage_units(a, spec)
            cmds = {"torch": [a.python, os.path.join(HERE, "torch_pipe.py"),
                              f"--schedule={schedule}", f"--stage_units={units}",
                              f"--steps={a.pipe_steps}", f"--precision={precision}",
                              f"--attention={a.attention}", f"--adamw={a.adamw}",
                              f"--data={CORPUS}"]} if schedule in TORCH_SCHEDULES else {}
            title = (f"pipeline D=2 M=8, 4 layers C=128 T=128, {schedule}, stage units {units}, "
                     f"{precision}")
            counter = iter(range(1, 1000))
            # Two processes of one thread each: twice one thread's peak.
            row = case(a, title, PIPE, lambda: ours_pipe(
                a, spec, os.path.join(work, f"up-{schedule}-{precision}-{next(counter)}")),
                cmds, lambda: case_peak(a, precision, 1, processes=2))
            rows.append({**row, "shape": "pipe", "precision": precision, "threads": 1,
                         "goal": schedule in GOAL_SCHEDULES})
    return rows


def met(ok):
    return "met" if ok else "not met"


def ceiling(row, peak):
    """The most ours / torch could be here: a step of ours at the whole measured GEMM peak over
    torch's median. None without a torch side, or where torch's step ran above that peak."""
    torch = row["gflops"].get("torch")
    return peak / torch if torch and torch <= peak else None


def report(a, rows, floor=None):
    print(f"{a.attention} attention, AdamW {a.adamw}; ratio = our median tokens/s over torch "
          f"eager's (goal >= {RATIO_GOAL}x; torch.compile's beside it, informational); ceiling "
          f"= the ratio of a step of ours at the whole GEMM peak of the case's minutes")
    for row in rows:
        peak = row["peak"]
        row["mfu"] = row["gflops"]["ours"] / peak
        gap = (f"  idle gap {row['gap']:+.1f} points (goal within {GAP_GOAL:.0f})"
               if row["gap"] is not None else "")
        # Three decimals: at two, a 1.297x that misses the goal would print as 1.30x.
        ratio = f"{row['ratio']:6.3f}x" if row["ratio"] else "    -  "
        pairs = (f"  (run by run {min(row['pairs']):.2f}-{max(row['pairs']):.2f}x)"
                 if row["pairs"] else "")
        goal = (f"{met(row['ratio'] >= RATIO_GOAL):7s}" if row["ratio"] and row["goal"]
                else "       ")
        versus = (f"  (compile {row['compile']:.2f}x)" if row["compile"] else
                  "  (compile failed)" if row["compile_failed"] else "")
        top = ceiling(row, peak)
        bound = ("" if "torch" not in row["gflops"] else
                 f"  ceiling {top:.2f}x" + (" (below the goal)" if top < RATIO_GOAL else "")
                 if top else "  ceiling - (torch above the measured peak)")
        print(f"  {ratio}  {goal}  {row['case']}{versus}{pairs}{bound}{gap}")
    if floor:
        print(f"  side by side's noise floor, run by run: {floor}")
    for precision, goal in PEAK_GOALS.items():
        shares = [r for r in rows
                  if r["shape"] == "b" and r["precision"] == precision and r["goal"]]
        label = f"{precision} step at shape (b) >= {100 * goal:.0f}% of the {precision} GEMM peak"
        if not shares:
            print(f"  {label}: not measured (shape b or {precision} not run)")
        for r in shares:
            print(f"  {label}, {r['threads']} thread{'s' if r['threads'] > 1 else ''}: "
                  f"{100 * r['mfu']:.1f}%, {met(r['mfu'] >= goal)}")


def parse():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ppctl", default="build/bin/ppctl")
    p.add_argument("--python", default="build/venv-hf/bin/python", help="a Python with torch")
    p.add_argument("--part", choices=["single", "pipe", "all"], default="all")
    p.add_argument("--quick", action="store_true",
                   help="shape a, 2 repeats, 4 single / 10 pipeline steps, no torch.compile")
    p.add_argument("--shapes", help=f"of {','.join(SHAPES)} (default all)")
    p.add_argument("--precision", type=lambda s: s.split(","),
                   help="fp32, bf16 or both (default both; bf16 only where it is no emulation: "
                        "without_emulated_bf16)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction,
                   help="torch.compile beside eager, one process (default on; off with --quick)")
    p.add_argument("--repeats", type=int)
    p.add_argument("--threads", type=lambda s: [int(t) for t in s.split(",")], default=[1, 2])
    p.add_argument("--schedules", type=lambda s: s.split(","),
                   default=["1f1b", "interleaved-1f1b", "zb-h1", "zb-v"])
    p.add_argument("--single_steps", type=int, help="steps per run; 2 warm-up (default 8)")
    p.add_argument("--pipe_steps", type=int, help="default 30")
    p.add_argument("--attention", choices=["sdpa", "manual"], default="sdpa")
    p.add_argument("--adamw", choices=["default", "foreach", "fused"], default="default")
    p.add_argument("--side_by_side", action="store_true",
                   help="also run each 1-thread case with ours and torch eager at once, each "
                        "pinned to a core of its own (side_by_side.py; informational)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run")
    a = p.parse_args()
    for key, value in (QUICK if a.quick else FULL).items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    if any(s not in SHAPES for s in a.shapes.split(",")):
        p.error(f"--shapes: one or more of {','.join(SHAPES)}")
    a.precision_given = a.precision is not None
    a.precision = a.precision or list(PRECISIONS)
    if any(x not in PRECISIONS for x in a.precision):
        p.error("--precision: fp32, bf16 or both")
    a.shapes = [SHAPES[s] for s in a.shapes.split(",")]
    return a


def main():
    a = parse()
    if not os.path.exists(CORPUS):
        sys.exit(f"peer_bench: needs {CORPUS} (Debian's base-files)")
    peaks, flags = machine(a)
    a.precision = without_emulated_bf16(a, flags)
    with tempfile.TemporaryDirectory(prefix="peer-bench-") as work:
        rows = []
        floor = None
        if a.side_by_side and a.part != "pipe" and side_by_side.CORES:
            shape, precision = a.shapes[0], a.precision[0]
            floor = side_by_side.noise_floor(a, f"({shape.name}) {precision}",
                                             pair_cmds(a, shape, precision, work)[0])
        if a.part in ("single", "all"):
            rows += single_cases(a, work, peaks)
        if a.part in ("pipe", "all"):
            rows += pipe_cases(a, work)
    report(a, rows, floor)
    return 0 if all(row["sane"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
