"""Packed documents (data.documents "mask", model.positions "document") against a PyTorch reference.

The reference is a GPT written here in plain torch ops (our tensor names, docs/model.md) with an
explicit (T, T) boolean attention mask per row, built from the rule of worker/data/data.h
"Documents": for a window's inputs x[0..T), doc_start[t] is the largest t' <= t with t' == 0 or
x[t'-1] == EOT (the byte 0 for bytes data); token t attends keys doc_start[t]..t, and with
positions "document" its position id is t - doc_start[t]. Every target stays in the loss.

- (a) float64: the packed window with the mask and document positions gives, token for token,
  the losses of each of its documents run alone (positions from 0, plain causal), within 1e-9.
- (b) `ppctl train`'s first-step loss (fp32) equals the float64 masked reference within 1e-6
  relative, for documents "mask" with positions "document" and with "absolute"; and, as a check
  of this harness itself (weights, windows), documents "none" against the plain causal reference.
- (c) 10 steps of fp32 training (AdamW as worker/optim does it: bias-corrected, decay on 2-D
  tensors only, torch's clip scale, warm-up then cosine rates of common/step_math.h) equal the
  reference trained in float64 within 1e-5 relative per step (an fp32 reference is printed too).
- The masked reference's losses differ from the unmasked one's, and from absolute positions', on
  the same windows by far more than the tolerances, so every comparison above can fail.

The weights are made here and handed to ppctl as model.init_from (a Hugging Face GPT-2 folder);
the windows are the trainer's (worker/data/data.h "Window formula", reimplemented below).
Usage: doc_mask_torch_test.py --ppctl PATH
"""

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

V, T, C, NH, L = 256, 32, 32, 2, 2
M, B, STEPS = 2, 2, 10
EOT = 0
TRAIN = {"lr": 3e-3, "weightDecay": 0.1, "gradClip": 1.0, "warmupSteps": 3, "decay": "cosine",
         "minLr": 3e-4, "seed": 1, "threads": 1}
BETA1, BETA2, EPS = 0.9, 0.95, 1e-8  # TrainSpec defaults (the spec leaves them at 0)

FAILURES = []


def check(ok, what):
    print(("  ok    " if ok else "  FAIL  ") + what, flush=True)
    if not ok:
        FAILURES.append(what)


# ---- data -----------------------------------------------------------------------------------

def make_corpus():
    """Documents of mixed lengths, each followed by EOT: short ones (several per window), ones
    longer than T (windows start inside them), and one of length zero (the bytes "\\0\\0")."""
    rng = random.Random(33)
    lengths = [5, 11, 3, 19, 0, 7, 47, 2, 13, 8, 71, 4, 16, 1, 9, 26, 6, 38, 12, 3]
    docs = []
    for i in range(6):
        for n in lengths:
            if n == 0 and i > 0:
                n = 10  # a single zero-length document
            docs.append(bytes(rng.choice(b"abcdefghij klmnop,.") for _ in range(n)))
    return b"".join(d + bytes([EOT]) for d in docs)


def window_starts(n_tokens, sequences):
    """start(s) of worker/data/data.h over AllWindows (no holdout): K = N - T, P the smallest
    p >= max(1, floor(K * 40503 / 2^16)) with gcd(p, K) = 1, start = (s * P) mod K."""
    k = n_tokens - T
    p = max(1, (k * 40503) >> 16)
    while math.gcd(p, k) != 1:
        p += 1
    return [(s * p) % k for s in sequences]


def step_windows(corpus, step):
    """The M microbatches of step `step` (0-based): (inputs, targets) of (B, T) each. Row b of
    microbatch j reads sequence (step * M + j) * B + b."""
    out = []
    for j in range(M):
        starts = window_starts(len(corpus), [(step * M + j) * B + b for b in range(B)])
        rows = torch.tensor([list(corpus[s:s + T + 1]) for s in starts], dtype=torch.long)
        out.append((rows[:, :-1], rows[:, 1:]))
    return out


def doc_starts(x, eot_opens=False):
    """doc_start[t] of one window's inputs (a list of T ids). eot_opens: the off-by-one rule
    (an EOT opens the next document instead of closing its own), only to show it is caught."""
    ds = [0] * len(x)
    for t in range(1, len(x)):
        ds[t] = t if x[t - (0 if eot_opens else 1)] == EOT else ds[t - 1]
    return ds


def layout(x, documents, positions, eot_opens=False):
    """Position ids (B, T) and the allowed keys (B, T, T) of inputs x (B, T)."""
    pos, allowed = [], []
    for row in x.tolist():
        n = len(row)
        ds = doc_starts(row, eot_opens) if documents == "mask" else [0] * n
        pos.append([t - ds[t] if positions == "document" else t for t in range(n)])
        a = torch.zeros(n, n, dtype=torch.bool)
        for t in range(n):
            a[t, ds[t]:t + 1] = True
        allowed.append(a)
    return torch.tensor(pos, dtype=torch.long), torch.stack(allowed)


# ---- model ----------------------------------------------------------------------------------

def init_weights():
    """Our tensors (docs/model.md "Tensor names"), float32 values. Wider than our seeded
    N(0, 0.02) so that context and positions move the loss well beyond the tolerances."""
    g = torch.Generator().manual_seed(7)

    def normal(*shape, std):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).float()

    w = {"wte.weight": normal(V, C, std=0.3), "wpe.weight": normal(T, C, std=0.3)}
    for i in range(L):
        p = f"h.{i}."
        w[p + "ln_1.weight"] = 1 + normal(C, std=0.1)
        w[p + "ln_1.bias"] = normal(C, std=0.1)
        w[p + "attn.qkv.weight"] = normal(3 * C, C, std=0.3)
        w[p + "attn.qkv.bias"] = normal(3 * C, std=0.1)
        w[p + "attn.proj.weight"] = normal(C, C, std=0.15)
        w[p + "attn.proj.bias"] = normal(C, std=0.05)
        w[p + "ln_2.weight"] = 1 + normal(C, std=0.1)
        w[p + "ln_2.bias"] = normal(C, std=0.1)
        w[p + "mlp.fc.weight"] = normal(4 * C, C, std=0.15)
        w[p + "mlp.fc.bias"] = normal(4 * C, std=0.05)
        w[p + "mlp.proj.weight"] = normal(C, 4 * C, std=0.08)
        w[p + "mlp.proj.bias"] = normal(C, std=0.05)
    w["ln_f.weight"] = 1 + normal(C, std=0.1)
    w["ln_f.bias"] = normal(C, std=0.1)
    w["lm_head.weight"] = normal(V, C, std=0.15)
    return w


def save_hf(weights, folder):
    """A Hugging Face GPT-2 folder of `weights` (common/hf_gpt2.h: Conv1D weights transposed)."""
    os.makedirs(folder)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
              "n_positions": T, "n_embd": C, "n_layer": L, "n_head": NH, "n_inner": None,
              "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
              "tie_word_embeddings": False, "scale_attn_weights": True,
              "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
              "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "bos_token_id": None,
              "eos_token_id": None, "dtype": "float32"}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    conv1d = {"attn.qkv.weight": "attn.c_attn.weight", "attn.proj.weight": "attn.c_proj.weight",
              "mlp.fc.weight": "mlp.c_fc.weight", "mlp.proj.weight": "mlp.c_proj.weight"}
    hf = {}
    for name, value in weights.items():
        if name == "lm_head.weight":
            hf[name] = value.contiguous()
            continue
        key = "transformer." + name
        for ours, theirs in conv1d.items():
            if name.endswith(ours):
                key = "transformer." + name[:-len(ours)] + theirs
                value = value.t()
        key = key.replace("attn.qkv.bias", "attn.c_attn.bias").replace(
            "attn.proj.bias", "attn.c_proj.bias").replace("mlp.fc.bias", "mlp.c_fc.bias").replace(
            "mlp.proj.bias", "mlp.c_proj.bias")
        hf[key] = value.contiguous()
    save_file(hf, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})


def token_losses(w, x, y, documents, positions, eot_opens=False):
    """Per-token cross-entropy (B, T) of inputs x and targets y (B, T), in w's dtype."""
    pos, allowed = layout(x, documents, positions, eot_opens)
    b, n = x.shape
    hs = C // NH
    h = w["wte.weight"][x] + w["wpe.weight"][pos]
    for i in range(L):
        p = f"h.{i}."
        a = F.layer_norm(h, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], 1e-5)
        qkv = a @ w[p + "attn.qkv.weight"].t() + w[p + "attn.qkv.bias"]
        q, k, v = (t.reshape(b, n, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~allowed[:, None], float("-inf")).softmax(dim=-1)
        y_att = (att @ v).transpose(1, 2).reshape(b, n, C)
        h = h + y_att @ w[p + "attn.proj.weight"].t() + w[p + "attn.proj.bias"]
        a = F.layer_norm(h, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], 1e-5)
        a = F.gelu(a @ w[p + "mlp.fc.weight"].t() + w[p + "mlp.fc.bias"], approximate="tanh")
        h = h + a @ w[p + "mlp.proj.weight"].t() + w[p + "mlp.proj.bias"]
    h = F.layer_norm(h, (C,), w["ln_f.weight"], w["ln_f.bias"], 1e-5)
    logits = h @ w["lm_head.weight"].t()
    return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1), reduction="none").reshape(b, n)


def lr_at(step):
    """common/step_math.h LearningRateAt, 1-based step: linear warm-up, then cosine to min_lr
    over decay_steps = steps - warmup_steps."""
    lr, warm, min_lr = TRAIN["lr"], TRAIN["warmupSteps"], TRAIN["minLr"]
    if step <= warm:
        return lr * step / warm
    q = min(1.0, (step - warm) / max(1, STEPS - warm))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * q))


def reference_train(weights, corpus, documents, positions, dtype, steps=STEPS):
    """Our trainer's steps in torch: M microbatches (loss / M, gradients accumulating), the
    global-norm clip scale, AdamW (worker/optim/optim.h). The step losses."""
    w = {k: v.to(dtype).clone().requires_grad_(True) for k, v in weights.items()}
    m = {k: torch.zeros_like(v) for k, v in w.items()}
    s = {k: torch.zeros_like(v) for k, v in w.items()}
    losses = []
    for step in range(steps):
        total = 0.0
        for x, y in step_windows(corpus, step):
            loss = token_losses(w, x, y, documents, positions).mean()
            (loss / M).backward()
            total += loss.item()
        losses.append(total / M)
        with torch.no_grad():
            norm = math.sqrt(sum(float((w[k].grad.double() ** 2).sum()) for k in sorted(w)))
            scale = min(1.0, TRAIN["gradClip"] / (norm + 1e-6))
            t = step + 1
            lr, c1, c2 = lr_at(t), 1 - BETA1 ** t, 1 - BETA2 ** t
            for k, p in w.items():
                g = p.grad * scale
                m[k].mul_(BETA1).add_((1 - BETA1) * g)
                s[k].mul_(BETA2).add_((1 - BETA2) * g * g)
                decay = TRAIN["weightDecay"] if p.dim() == 2 else 0.0
                p -= lr * ((m[k] / c1) / ((s[k] / c2).sqrt() + EPS) + decay * p)
                p.grad = None
    return losses


# ---- ppctl ----------------------------------------------------------------------------------

def ppctl_train(ppctl, work, name, data, hf, documents, positions):
    spec = {"name": name,
            "model": {"vocabSize": V, "seqLen": T, "dModel": C, "nHeads": NH, "nLayers": L,
                      "initFrom": hf},
            "parallel": {"pipeline": 1, "schedule": "1f1b"},
            "train": dict(TRAIN, steps=STEPS, microbatches=M, microbatchSize=B),
            "data": {"path": data, "format": "bytes"}}
    if documents != "none":
        spec["data"]["documents"] = documents
    if positions != "absolute":
        spec["model"]["positions"] = positions
    return run_ppctl_train(ppctl, work, name, spec)


def run_ppctl_train(ppctl, work, name, spec):
    """`ppctl train` of `spec` (written to WORK/NAME.json); its STEP LOSS lines' losses."""
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    losses_path = os.path.join(work, name + ".losses")
    r = subprocess.run([ppctl, "train", path, "--threads=1", "--losses=" + losses_path],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"ppctl train {name} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    with open(losses_path) as f:
        rows = [line.split() for line in f if line.strip()]
    assert [int(r[0]) for r in rows] == list(range(1, STEPS + 1)), rows
    return [float(r[1]) for r in rows]


def rel(a, b):
    return abs(a - b) / abs(b)


# ---- the checks -----------------------------------------------------------------------------

def check_packed_equals_separate(weights, corpus):
    """(a): the packed window's per-token losses (mask, document positions) equal each document
    run alone, in float64."""
    w = {k: v.double() for k, v in weights.items()}
    windows = [x for step in range(2) for x, _ in step_windows(corpus, step)]
    rows_x = torch.cat(windows)
    starts = window_starts(len(corpus), range(2 * M * B))
    # Hand-picked windows besides the trainer's: one holding the zero-length document ("\0\0"),
    # one starting inside a document longer than T, one ending on an EOT.
    zero = corpus.index(bytes([EOT, EOT]))
    lengths = [len(d) for d in corpus.split(bytes([EOT]))]
    offset, long_doc = 0, None
    for n in lengths:
        if n > T + 5:
            long_doc = offset + 5  # inside it, 5 tokens after its start
            break
        offset += n + 1
    eot_last = [i for i in range(T, len(corpus) - 1) if corpus[i] == EOT][0] - (T - 1)
    extra = [max(0, zero - 10), long_doc, eot_last]
    for s in extra:
        starts.append(s)
    rows = torch.tensor([list(corpus[s:s + T + 1]) for s in starts], dtype=torch.long)
    x, y = rows[:, :-1], rows[:, 1:]
    check(torch.equal(x[:len(rows_x)], rows_x), "window formula rows agree with step_windows")
    packed = token_losses(w, x, y, "mask", "document")
    separate = torch.empty_like(packed)
    n_docs, has_zero, has_cut, has_eot_last = [], False, False, False
    for r in range(x.shape[0]):
        row = x[r].tolist()
        ds = doc_starts(row)
        firsts = sorted(set(ds))
        n_docs.append(len(firsts))
        for i, a in enumerate(firsts):
            e = firsts[i + 1] if i + 1 < len(firsts) else T
            separate[r, a:e] = token_losses(w, x[r:r + 1, a:e], y[r:r + 1, a:e], "none",
                                            "absolute")[0]
            has_zero |= (e - a == 1 and row[a] == EOT)
        has_cut |= (starts[r] > 0 and corpus[starts[r] - 1] != EOT)
        has_eot_last |= row[T - 1] == EOT
    err = float(((packed - separate).abs() / separate.abs()).max())
    print(f"  (a) packed vs separate documents, float64: max relative error {err:.3e} over "
          f"{x.shape[0]} windows of {min(n_docs)}..{max(n_docs)} documents")
    check(err <= 1e-9, f"(a) packed windows equal their documents run alone ({err:.3e} <= 1e-9)")
    check(sum(n >= 3 for n in n_docs[:len(rows_x)]) >= len(rows_x) // 2,
          f"(a) the trainer's windows hold several documents (documents per window {n_docs})")
    check(has_zero and has_cut and has_eot_last,
          "(a) windows include a zero-length document, a document cut by the window's start and "
          "an EOT as last input")
    # The same windows unmasked (absolute positions, plain causal): not the documents' losses.
    plain = token_losses(w, x, y, "none", "absolute")
    diff = float(((plain - separate).abs() / separate.abs()).max())
    print(f"  (a) unmasked packed vs separate documents: max relative difference {diff:.3e}")
    check(diff > 1e-3, f"(a) without the mask the losses differ ({diff:.3e} > 1e-3)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ppctl", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    torch.set_num_threads(1)
    t0 = time.time()
    print(f"torch {torch.__version__}")
    work = tempfile.mkdtemp(prefix="doc_mask_torch_test.")
    try:
        corpus = make_corpus()
        data = os.path.join(work, "docs.bin")
        with open(data, "wb") as f:
            f.write(corpus)
        weights = init_weights()
        hf = os.path.join(work, "hf")
        save_hf(weights, hf)
        print(f"corpus {len(corpus)} bytes, {corpus.count(bytes([EOT]))} documents; "
              f"L={L} C={C} NH={NH} T={T} M={M} B={B}, {STEPS} steps")

        check_packed_equals_separate(weights, corpus)

        # The float64 references of the three modes, step 1 first.
        modes = [("none", "absolute"), ("mask", "absolute"), ("mask", "document")]
        ref64 = {mode: reference_train(weights, corpus, *mode, torch.float64) for mode in modes}
        first = {mode: ref64[mode][0] for mode in modes}
        print("  reference first-step losses (float64): " +
              ", ".join(f"{d}/{p} {first[(d, p)]:.12f}" for d, p in modes))
        for a, b in [(modes[0], modes[2]), (modes[0], modes[1]), (modes[1], modes[2])]:
            d = rel(first[a], first[b])
            check(d > 1e-4, f"reference step-1 loss {a[0]}/{a[1]} differs from {b[0]}/{b[1]} "
                            f"({d:.3e} > 1e-4)")
        w64 = {k: v.double() for k, v in weights.items()}
        off = sum(token_losses(w64, x, y, "mask", "document", eot_opens=True).mean().item()
                  for x, y in step_windows(corpus, 0)) / M
        d = rel(off, first[("mask", "document")])
        check(d > 1e-4, f"the off-by-one rule (EOT opening a document) changes the step-1 loss "
                        f"({d:.3e} > 1e-4)")

        for documents, positions in modes:
            tag = f"{documents}/{positions}"
            try:
                ours = ppctl_train(args.ppctl, work, f"dm-{documents}-{positions}", data, hf,
                                   documents, positions)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                check(False, f"(b) {tag}: {e}")
                continue
            ref = ref64[(documents, positions)]
            e1 = rel(ours[0], ref[0])
            print(f"  (b) {tag}: step 1 ours {ours[0]:.12f} vs float64 {ref[0]:.12f}: "
                  f"relative error {e1:.3e}")
            check(e1 <= 1e-6, f"(b) {tag}: first-step loss within 1e-6 of float64 ({e1:.3e})")
            if documents == "mask" and positions == "absolute":
                continue  # step 1 only: (c) trains the mode, and none to check the harness
            ref32 = reference_train(weights, corpus, documents, positions, torch.float32)
            e64 = [rel(o, r) for o, r in zip(ours, ref)]
            e32 = [rel(o, r) for o, r in zip(ours, ref32)]
            for k in range(STEPS):
                print(f"      step {k + 1:2d}: ours {ours[k]:.9f}  float64 {ref[k]:.9f} "
                      f"({e64[k]:.2e})  float32 {ref32[k]:.9f} ({e32[k]:.2e})")
            print(f"  (c) {tag}: {STEPS} fp32 steps vs float64 reference: max relative error "
                  f"{max(e64):.3e} (vs an fp32 reference: {max(e32):.3e})")
            check(max(e64) <= 1e-5,
                  f"(c) {tag}: every step within 1e-5 of float64 ({max(e64):.3e})")
            check(ours[-1] < ours[0] - 0.1,
                  f"(c) {tag}: the loss falls ({ours[0]:.4f} -> {ours[-1]:.4f})")
            if documents == "mask":  # masked training is not unmasked training on these windows
                d = max(rel(a, b) for a, b in zip(ref64[("none", "absolute")], ours))
                check(d > 1e-3, f"(c) {tag}: unmasked reference steps differ from ours "
                                f"({d:.3e} > 1e-3)")
    finally:
        if args.keep:
            print("work folder kept:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{len(FAILURES)} failure(s); {time.time() - t0:.1f} s")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
