"""One process, one model: PyTorch's side of bench/peer's single-process cases, the counterpart of
`ppctl train`.

Each step: M microbatches of B sequences, forward and backward of each (loss / M, gradients
accumulating), torch.nn.utils.clip_grad_norm_ over all parameters, AdamW, zero_grad.
torch.set_num_threads(--threads) (and one inter-op thread). --precision=bf16 runs the forward and
the loss under torch.autocast("cpu", dtype=torch.bfloat16), the backward outside it, as the autocast
documentation asks (the weights, gradients and AdamW stay fp32, as ours do). --compile runs the
forward and the loss through torch.compile (the backward is compiled with them by AOTAutograd);
the compilation falls in the first step, which --warmup leaves out of the figure. Prints one line
per step like `ppctl train` does and a last line `RESULT {json}` for peer_bench.py.
"""
import argparse
import contextlib
import json
import statistics
import time
import warnings

# PyPI's torch asks for NumPy, which nothing here needs.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402

import torch_model


def parse():
    p = argparse.ArgumentParser(description=__doc__)
    for name, default in [("layers", 6), ("d_model", 256), ("heads", 4), ("seq_len", 128),
                          ("batch", 8), ("microbatches", 4), ("steps", 8), ("threads", 1),
                          ("seed", 1), ("warmup", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--compile", action="store_true", help="torch.compile the forward and loss")
    p.add_argument("--attention", choices=["sdpa", "manual"], default="sdpa")
    p.add_argument("--adamw", choices=["default", "foreach", "fused"], default="default")
    p.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    return p.parse_args()


def forward_loss_fn(model, precision, compile_it):
    """The microbatch's loss as a function of (inputs, targets), under autocast for bf16.
    Autocast sits inside the compiled function so that Dynamo traces it rather than guarding on
    the caller's state."""
    def forward_loss(x, y):
        cast = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16"
                else contextlib.nullcontext())
        with cast:
            return torch_model.loss_fn(model(x), y)
    return torch.compile(forward_loss) if compile_it else forward_loss


def main():
    a = parse()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(a.seed)
    cfg = {"vocab": 256, "seq_len": a.seq_len, "d_model": a.d_model, "n_heads": a.heads,
           "n_layers": a.layers, "attention": a.attention}
    model = torch_model.make_units(0, a.layers + 1, cfg)
    opt = torch_model.adamw(model.parameters(), a.lr, 0.1, a.adamw)
    forward_loss = forward_loss_fn(model, a.precision, a.compile)
    data = torch_model.Windows(a.data, a.seq_len, a.seed)
    tokens = a.microbatches * a.batch * a.seq_len
    losses, seconds = [], []
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()
        total = 0.0
        for _ in range(a.microbatches):
            x, y = data.batch(a.batch)
            loss = forward_loss(x, y) / a.microbatches
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - t0)
        losses.append(total)
        print(f"step {step}/{a.steps} loss {total:.6f} {seconds[-1]:.3f} s "
              f"{tokens / seconds[-1]:.0f} tok/s", flush=True)
    timed = seconds[a.warmup:] or seconds
    print("RESULT " + json.dumps({"tok_s": tokens / statistics.median(timed),
                                  "first_loss": losses[0], "last_loss": losses[-1],
                                  "torch": torch.__version__, "threads": torch.get_num_threads(),
                                  "precision": a.precision, "compiled": a.compile,
                                  "first_step_s": seconds[0]}))


if __name__ == "__main__":
    main()
