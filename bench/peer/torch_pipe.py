"""PyTorch's side of bench/peer case (b): torch.distributed.pipelining on gloo, D=2 processes.

Two processes (torch.multiprocessing.spawn), one intra-op and one inter-op thread each, joined by
gloo through a FileStore (no port to pick). Each holds the stages its schedule gives it, as
PipelineStage objects over nn.Sequential runs of the partition units the planner chose for our side
(--stage_units, units per stage, from `ppctl plan --spec`), so both sides cut the model the same
way:
  1f1b              Schedule1F1B, one stage per rank
  interleaved-1f1b  ScheduleInterleaved1F1B, stages s and s+D on rank s (looped, as ours)
  zb-v              ScheduleZBVZeroBubble, stages r and 2D-1-r on rank r (V shape, as ours)
A step: schedule.step over M microbatches (the schedule scales gradients by 1/M), the global
gradient norm (each rank's sum of squares, one all_reduce), clipping to 1.0, AdamW, zero_grad.
--precision=bf16: each stage's forward runs under torch.autocast("cpu", dtype=torch.bfloat16) and
its backward outside it, as in torch_train.py; a stage hands on fp32 (the residual stream is fp32
under autocast; the head's logits are cast back), so what crosses ranks, and the loss, are fp32.
Throughput as `ppctl up` reports it: tokens of steps 2..N over the time from the end of step 1
to the end of step N (rank 0's clock). Prints `RESULT {json}` last.
"""
import argparse
import json
import os
import tempfile
import time
import warnings

# PyPI's torch asks for NumPy, which nothing here needs.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed import pipelining

import torch_model

SCHEDULES = {"1f1b": "Schedule1F1B", "interleaved-1f1b": "ScheduleInterleaved1F1B",
             "zb-v": "ScheduleZBVZeroBubble"}


def parse():
    p = argparse.ArgumentParser(description=__doc__)
    for name, default in [("layers", 4), ("d_model", 128), ("heads", 4), ("seq_len", 128),
                          ("batch", 4), ("microbatches", 8), ("steps", 30), ("seed", 1)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--schedule", choices=sorted(SCHEDULES), default="1f1b")
    p.add_argument("--stage_units", required=True, help="units per stage, comma-separated")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--attention", choices=["sdpa", "manual"], default="sdpa")
    p.add_argument("--adamw", choices=["default", "foreach", "fused"], default="default")
    p.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    return p.parse_args()


def stage_to_rank(schedule, S, D):
    if schedule == "zb-v":
        return [s if s < D else 2 * D - 1 - s for s in range(S)]
    return [s % D for s in range(S)]


class Bf16Forward(torch.nn.Module):
    """A stage's units with their forward under CPU autocast. Its output is cast to fp32 so that it
    matches the fp32 metadata the stage infers on meta tensors (autocast leaves those alone)."""

    def __init__(self, units):
        super().__init__()
        self.units = units

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.units(x).float()


def build_stages(a, rank, D, cfg):
    units = [int(u) for u in a.stage_units.split(",")]
    S, owner = len(units), stage_to_rank(a.schedule, len(units), D)
    stages, first = [], 0
    for s, n in enumerate(units):
        if owner[s] == rank:
            torch.manual_seed(a.seed * 1000 + s)
            module = torch_model.make_units(first, first + n - 1, cfg)
            if a.precision == "bf16":
                module = Bf16Forward(module)
            stages.append(pipelining.PipelineStage(module, s, S, torch.device("cpu")))
        first += n
    return stages, S


def clip(modules, max_norm):
    grads = [p.grad for m in modules for p in m.parameters() if p.grad is not None]
    sq = torch.stack([g.pow(2).sum() for g in grads]).sum().reshape(1)
    dist.all_reduce(sq)
    scale = min(1.0, max_norm / (sq.sqrt().item() + 1e-6))
    for g in grads:
        g.mul_(scale)


def run_rank(rank, a, D, out_dir):
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", init_method="file://" + os.path.join(out_dir, "store"),
                            rank=rank, world_size=D)
    cfg = {"vocab": 256, "seq_len": a.seq_len, "d_model": a.d_model, "n_heads": a.heads,
           "n_layers": a.layers, "attention": a.attention}
    stages, S = build_stages(a, rank, D, cfg)
    cls = getattr(pipelining, SCHEDULES[a.schedule])
    sched = cls(stages[0] if len(stages) == 1 else stages, n_microbatches=a.microbatches,
                loss_fn=torch_model.loss_fn)
    modules = [st.submod for st in stages]
    opt = torch_model.adamw([p for m in modules for p in m.parameters()], a.lr, 0.1, a.adamw)
    has_first = any(st.stage_index == 0 for st in stages)
    has_last = any(st.stage_index == S - 1 for st in stages)
    data = torch_model.Windows(a.data, a.seq_len, a.seed)  # same stream on every rank
    ends, losses = [], []
    dist.barrier()
    for _ in range(a.steps):
        x, y = data.batch(a.microbatches * a.batch)
        mb_losses = []
        args = (x,) if has_first else ()
        kwargs = {"target": y, "losses": mb_losses} if has_last else {}
        sched.step(*args, **kwargs)
        clip(modules, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        ends.append(time.perf_counter())
        if has_last:
            losses.append(float(torch.stack(mb_losses).detach().mean()))
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"ends": ends, "losses": losses}, f)
    dist.destroy_process_group()


def main():
    a = parse()
    D = 2
    with tempfile.TemporaryDirectory(prefix="peer-torch-pipe-") as out_dir:
        mp.spawn(run_rank, args=(a, D, out_dir), nprocs=D, join=True)
        ranks = [json.load(open(os.path.join(out_dir, f"rank{r}.json"))) for r in range(D)]
    ends = ranks[0]["ends"]
    losses = next(r["losses"] for r in ranks if r["losses"])
    tokens = a.microbatches * a.batch * a.seq_len
    for i, loss in enumerate(losses):
        print(f"step {i + 1}/{a.steps} loss {loss:.6f}")
    print("RESULT " + json.dumps({
        "tok_s": tokens * (a.steps - 1) / (ends[-1] - ends[0]), "first_loss": losses[0],
        "last_loss": losses[-1], "torch": torch.__version__,
        "schedule": SCHEDULES[a.schedule], "precision": a.precision}))


if __name__ == "__main__":
    main()
