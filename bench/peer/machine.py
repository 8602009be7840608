"""bench/peer's view of the machine: the CPU (lscpu's model and flags), the GEMM peaks
(torch_machine.py) for the header and beside each case, and which precisions the CPU runs without
emulation."""
import os

from procs import run, torch_result

HERE = os.path.dirname(os.path.abspath(__file__))
PRECISIONS = ("fp32", "bf16")
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu():
    """lscpu's model name and which of CPU_FLAGS it lists."""
    out = run(["lscpu"], 60)
    field = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    flags = set(field.get("Flags", "").split())
    return field.get("Model name", "?").strip(), [f for f in CPU_FLAGS if f in flags]


def machine(a):
    """Print the header line; return the measured GEMM peaks, {precision: {threads: GFLOP/s}},
    and the CPU's flags of CPU_FLAGS."""
    model, flags = cpu()
    absent = [f for f in CPU_FLAGS if f not in flags]
    cores = len(os.sched_getaffinity(0))
    threads = sorted(set(a.threads) | ({1} if a.part != "single" else set()))
    peaks, info = measure_peaks(a, threads, PRECISIONS, 5)
    print(f"CPU {model}, {cores} cores, threads {','.join(map(str, a.threads))}; "
          f"flags {' '.join(flags) or '-'} (absent: {' '.join(absent) or '-'}); torch "
          f"{info['torch']}, MKL {info['mkl']}, oneDNN {info['onednn']}, ATen "
          f"{info['capability']}")
    print_peaks(info)
    return peaks, flags


def measure_peaks(a, threads, precisions, repeats):
    """The GEMM peaks, {precision: {threads: GFLOP/s}}, and torch_machine.py's answer. The bf16
    peak is the faster of the two products on bf16 operands: bf16 values and their products are
    exact in fp32, so where fp32's product is the faster one (Intel without AMX: half the rate
    in bf16) it is this CPU's bf16 product too, and ours takes it there (docs/jobs.md
    "Precision")."""
    info = torch_result(run([a.python, os.path.join(HERE, "torch_machine.py"),
                             "--threads=" + ",".join(map(str, threads)),
                             "--precision=" + ",".join(precisions), f"--repeats={repeats}"],
                            a.timeout))
    peaks = {precision: {int(t): p["gflops"] for t, p in by_threads.items()}
             for precision, by_threads in info["peak"].items()}
    if "bf16" in peaks and "fp32" in peaks:
        peaks["bf16"] = {t: max(g, peaks["fp32"][t]) for t, g in peaks["bf16"].items()}
    return peaks, info


def print_peaks(info):
    for precision, by_threads in info["peak"].items():
        print(f"GEMM peak {precision} (best of {info['repeats']}): " + "; ".join(
            f"{t} thread{'s' if t != '1' else ''} {p['gflops']:.1f} GFLOP/s ({p['via']}, "
            f"{p['size']}^3)" for t, p in by_threads.items()), flush=True)
    fp32, bf16 = info["peak"].get("fp32", {}), info["peak"].get("bf16", {})
    if any(fp32[t]["gflops"] > p["gflops"] for t, p in bf16.items() if t in fp32):
        print("bf16 shares are of fp32's peak where it is higher: the faster product on bf16 "
              "operands here", flush=True)


def case_peak(a, precision, threads, processes=1):
    """The GEMM peak of a case, measured beside its runs (3 products; fp32's too for bf16, as
    measure_peaks): on a shared host a core's speed moves by the minute, and a peak from another
    minute (the header's) put steps at 107-135% of it on 2026-12-06, or far below. processes
    copies of one thread count's rate for a pipeline of one-thread processes."""
    wanted = ["fp32"] if precision == "fp32" else ["fp32", "bf16"]
    peaks, _ = measure_peaks(a, [threads], wanted, 3)
    return processes * peaks[precision][threads]


def without_emulated_bf16(a, flags):
    """a.precision, less bf16 where the CPU has no bf16 instructions (neither AVX512-BF16 nor
    AMX-BF16) and --precision did not ask for it: torch's autocast then runs emulated products
    (2 GFLOP/s against 81 in fp32 on an AVX2-only EPYC), hours a run, and its ratio would measure
    the emulation; ours takes its fp32-speed fallback there."""
    if "bf16" not in a.precision or a.precision_given or {"avx512_bf16", "amx_bf16"} & set(flags):
        return a.precision
    print("bf16 not run: this CPU has no bf16 instructions (avx512_bf16, amx_bf16); "
          "--precision=bf16 runs it anyway", flush=True)
    return [p for p in a.precision if p != "bf16"]
