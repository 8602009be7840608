"""The machine as PyTorch sees it, for bench/peer's header: torch's version, the BLAS libraries it
was built with (MKL, oneDNN), ATen's vector level, and a measured GEMM peak in fp32 and bf16 for
each of --threads (bench/peer measures them once for its header and again beside each case).

The peak is the best rate, 2·m·n·k FLOPs over the wall time of one call, of --repeats products of
--size cubed (less where a probe finds the CPU slow in that precision: timed_size) after one
warm-up call (the libraries pack, JIT and allocate on the first). torch is
the yardstick because it carries the fastest CPU BLAS we have: torch.mm runs fp32 on MKL and bf16
on oneDNN (AVX512-BF16, or AMX where the CPU has it); oneDNN's fp32 matmul, which our trainer uses,
is tried too (torch.ops.mkldnn._linear_pointwise) and the faster of the two is the fp32 peak, so
our share of it is never flattered by MKL running slowly on AMD. Prints `RESULT {json}` last.
"""
import argparse
import json
import re
import time
import warnings

# PyPI's torch asks for NumPy, which nothing here needs.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--threads", type=lambda s: [int(t) for t in s.split(",")], default=[1, 2])
    p.add_argument("--size", type=int, default=2048,
                   help="m = n = k of the timed products, at most (timed_size)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--precision", type=lambda s: s.split(","), default=["fp32", "bf16"],
                   help="fp32, bf16 or both: the peaks to measure")
    return p.parse_args()


def libraries():
    """Versions from torch's build report; None where a library is absent."""
    config = torch.__config__.show()

    def grab(pattern):
        m = re.search(pattern, config)
        return m[1] if m else None

    return {"torch": torch.__version__,
            "mkl": grab(r"Math Kernel Library Version ([\d.]+)"),
            "onednn": grab(r"(?:MKL-DNN|oneDNN) v([\d.]+)"),
            "capability": grab(r"CPU capability usage: (\S+)")}


def best_gflops(fn, flops, repeats):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return flops / best / 1e9


def candidates(dtype, n):
    """(name, product) pairs that compute a (n, n) x (n, n) product in dtype."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    found = [("torch.mm, " + ("MKL" if dtype == torch.float32 else "oneDNN"),
              lambda: torch.mm(a, b))]
    if dtype == torch.float32 and torch.backends.mkldnn.is_available():
        def onednn():  # a b^T, the same FLOPs
            return torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")
        try:
            onednn()
            found.append(("oneDNN matmul", onednn))
        except (RuntimeError, AttributeError):  # an op this torch build lacks: MKL alone
            pass
    return found


PROBE = 256  # m = n = k of the probe that sizes the timed products
SECONDS_PER_CALL = 0.5  # the timed products' size is cut so that one call takes about this


def timed_size(dtype, largest):
    """--size, or less where the CPU is slow in dtype: a CPU without AVX512-BF16 or AMX emulates
    bf16 products far below its fp32 rate, and 2048^3 of them took over 10 minutes (AMD EPYC with
    AVX2 only). The size, a multiple of PROBE, whose call takes about SECONDS_PER_CALL at the
    probe's rate."""
    rate = max(best_gflops(fn, 2.0 * PROBE ** 3, 1) for _, fn in candidates(dtype, PROBE))
    fits = (SECONDS_PER_CALL * rate * 1e9 / 2.0) ** (1.0 / 3.0)
    return max(PROBE, min(largest, int(fits) // PROBE * PROBE))


def peak(dtype, threads, largest, repeats):
    """{"gflops", "via", "size"} of the fastest candidate on `threads` threads."""
    torch.set_num_threads(threads)
    n = timed_size(dtype, largest)
    rates = [(best_gflops(fn, 2.0 * n ** 3, repeats), name) for name, fn in candidates(dtype, n)]
    gflops, via = max(rates)
    return {"gflops": gflops, "via": via, "size": n}


def main():
    a = parse()
    torch.set_num_interop_threads(1)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    peaks = {name: {str(t): peak(dtypes[name], t, a.size, a.repeats) for t in a.threads}
             for name in a.precision}
    print("RESULT " + json.dumps({**libraries(), "repeats": a.repeats, "peak": peaks}))


if __name__ == "__main__":
    main()
