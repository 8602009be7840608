"""Packed variable-length microbatches (train.tokensPerMicrobatch K) against a PyTorch reference.

The reference packs the corpus by the rule of common/packing.h, reimplemented here from the
rule's text: documents are the stream's input positions [0, N-1) cut after every end-of-text
token (the byte 0 for bytes data); each document is cut into pieces of at most
L = min(seq_len, K) tokens; pieces fill rows greedily in stream order while a row stays <= K
tokens. Training sequence s (microbatch j of step k is s = k * M + j, microbatchSize 1) reads
row WindowStart(s, {0, G}) of the G rows (worker/data/data.h "Window formula", first = 0, K = G).
Each row is run as one (1, n) sequence with an explicit (n, n) block-causal boolean mask built
from its pieces, and position ids restarting at 0 in each piece. The step loss is the mean over
every token of the step (sum_j loss_j n_j / sum_j n_j), and the gradients are those of that loss.

- (a) float64: a packed row's per-token losses equal those of each of its pieces run alone
  (plain causal, positions from 0), within 1e-9 relative, for every row of the corpus.
- (b) float64: the reference's first-step loss (masked rows, token mean) equals the same loss
  computed a second, independent way (every piece alone, token-weighted mean) within 1e-9
  relative; and `ppctl train`'s first-step loss (fp32) equals it within 1e-6 relative.
- (c) 10 steps of `ppctl train` (fp32) equal the float64 reference trained with AdamW exactly as
  doc_mask_torch_test.py's reference does it within 1e-5 relative per step (an fp32 reference
  is printed too).
- The test fails if packing degenerates: the rows it trains differ in length, hold several
  pieces, and include pieces of a document longer than seq_len cut into pieces. And the packed
  loss differs from unpacked references (fixed windows of seq_len, documents "mask"; the rows
  without the block mask; the mean of the microbatch means instead of the token mean) by far
  more than the tolerances, so every comparison above can fail.

The model, weights, Hugging Face export and checks come from doc_mask_torch_test.py (imported).
Usage: packed_torch_test.py --ppctl PATH
"""

import argparse
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doc_mask_torch_test as dm  # noqa: E402
import torch  # noqa: E402

T, EOT, STEPS, TRAIN = dm.T, dm.EOT, dm.STEPS, dm.TRAIN
K = 64             # train.tokensPerMicrobatch
LIMIT = min(T, K)  # L of common/packing.h: the longest piece
M = 4              # microbatches (= rows) per step
check, rel = dm.check, dm.rel


# ---- data -----------------------------------------------------------------------------------

def make_corpus():
    """Documents of 3..60 bytes (random), each followed by EOT, plus a few chosen ones: of
    T-1 and T bytes (a piece of exactly L tokens, then one of the EOT alone), longer than 2 T
    (three pieces), and one of zero bytes (two EOTs in a row: a one-token document)."""
    rng = random.Random(34)
    lengths = [rng.randint(3, 60) for _ in range(70)]
    lengths[5], lengths[17], lengths[29], lengths[41], lengths[53] = T - 1, T, 0, 2 * T + 9, 100
    docs = [bytes(rng.choice(b"abcdefghij klmnop,.") for _ in range(n)) for n in lengths]
    return b"".join(d + bytes([EOT]) for d in docs), lengths


def pack_rows(stream, eot, limit, budget):
    """common/packing.h PackRows from its rule: (starts, pieces), starts of the G + 1 row
    boundaries, pieces[g] the (start, end) stream positions of row g's pieces."""
    n_inputs = len(stream) - 1  # the last token is only a target
    docs, a = [], 0
    for p in range(n_inputs):
        if stream[p] == eot:
            docs.append((a, p + 1))
            a = p + 1
    if a < n_inputs:
        docs.append((a, n_inputs))
    pieces = [(p, min(p + limit, b)) for a, b in docs for p in range(a, b, limit)]
    starts, rows, tokens = [0], [[]], 0
    for a, b in pieces:
        if tokens + (b - a) > budget:
            starts.append(a)
            rows.append([])
            tokens = 0
        rows[-1].append((a, b))
        tokens += b - a
    starts.append(n_inputs)
    return starts, rows


def row_sequences(inputs, eot, limit):
    """common/packing.h RowSequences: cu_seqlens of a row's inputs. A piece starts at 0, after
    an EOT, and `limit` tokens after the previous piece start."""
    cu = [0]
    for t in range(1, len(inputs)):
        if inputs[t - 1] == eot or t - cu[-1] == limit:
            cu.append(t)
    return cu + [len(inputs)]


def window_start(s, count):
    """worker/data/data.h WindowStart(s, {0, count})."""
    p = max(1, (count * 40503) >> 16)
    while math.gcd(p, count) != 1:
        p += 1
    return (s * p) % count


class Packed:
    """The corpus's rows and the rows each step trains."""

    def __init__(self, stream):
        self.stream = stream
        self.starts, self.pieces = pack_rows(stream, EOT, LIMIT, K)
        self.count = len(self.starts) - 1

    def row(self, g):
        """(x, y, cu) of row g: inputs and targets (1, n), its sequences' offsets."""
        a, b = self.starts[g], self.starts[g + 1]
        tokens = torch.tensor(list(self.stream[a:b + 1]), dtype=torch.long)
        x, y = tokens[:-1][None], tokens[1:][None]
        return x, y, row_sequences(x[0].tolist(), EOT, LIMIT)

    def step_rows(self, step):
        """The M rows of step `step` (0-based): sequence step * M + j for microbatch j."""
        return [window_start(step * M + j, self.count) for j in range(M)]


def block_causal(cu, across=False):
    """Position ids (1, n) and allowed keys (1, n, n) of a row of sequences cu: token t of the
    piece [a, e) attends keys a..t, position t - a. across: plain causal over the whole row
    (positions still per piece), the mask left out."""
    n = cu[-1]
    pos, allowed = [0] * n, torch.zeros(n, n, dtype=torch.bool)
    for a, e in zip(cu, cu[1:]):
        for t in range(a, e):
            pos[t] = t - a
            allowed[t, 0 if across else a:t + 1] = True
    return torch.tensor([pos], dtype=torch.long), allowed[None]


def row_losses(w, x, y, cu, across=False):
    """Per-token losses (1, n) of one packed row: doc_mask_torch_test's GPT with this row's
    positions and mask in place of its window layout."""
    pos, allowed = block_causal(cu, across)
    saved = dm.layout
    dm.layout = lambda *_: (pos, allowed)
    try:
        return dm.token_losses(w, x, y, None, None)
    finally:
        dm.layout = saved


def pieces_alone(w, x, y, cu):
    """Per-token losses (1, n) of a row whose every piece runs alone: plain causal, positions
    from 0 (doc_mask_torch_test's unmasked forward, no mask of ours)."""
    out = torch.empty(x.shape, dtype=w["wte.weight"].dtype)
    for a, e in zip(cu, cu[1:]):
        out[:, a:e] = dm.token_losses(w, x[:, a:e], y[:, a:e], "none", "absolute")
    return out


# ---- reference training ---------------------------------------------------------------------

def reference_train(weights, packed, dtype, steps=STEPS, weighting="tokens", across=False):
    """The trainer's steps in torch on packed rows: each token's loss gradient seeded with
    1 / N_step (the step's tokens), accumulated over the M rows; the global-norm clip scale and
    AdamW as doc_mask_torch_test.reference_train. weighting "rows": the mean of the microbatch
    means instead (only to show it is caught). The step losses."""
    w = {k: v.to(dtype).clone().requires_grad_(True) for k, v in weights.items()}
    m = {k: torch.zeros_like(v) for k, v in w.items()}
    s = {k: torch.zeros_like(v) for k, v in w.items()}
    losses = []
    for step in range(steps):
        rows = [packed.row(g) for g in packed.step_rows(step)]
        n_step = sum(x.shape[1] for x, _, _ in rows)
        total = 0.0
        for x, y, cu in rows:
            loss = row_losses(w, x, y, cu, across)
            weight = 1.0 / n_step if weighting == "tokens" else 1.0 / (M * x.shape[1])
            (loss.sum() * weight).backward()
            total += loss.sum().item() * weight
        losses.append(total)
        with torch.no_grad():
            norm = math.sqrt(sum(float((w[k].grad.double() ** 2).sum()) for k in sorted(w)))
            scale = min(1.0, TRAIN["gradClip"] / (norm + 1e-6))
            t = step + 1
            lr, c1, c2 = dm.lr_at(t), 1 - dm.BETA1 ** t, 1 - dm.BETA2 ** t
            for k, p in w.items():
                g = p.grad * scale
                m[k].mul_(dm.BETA1).add_((1 - dm.BETA1) * g)
                s[k].mul_(dm.BETA2).add_((1 - dm.BETA2) * g * g)
                decay = TRAIN["weightDecay"] if p.dim() == 2 else 0.0
                p -= lr * ((m[k] / c1) / ((s[k] / c2).sqrt() + dm.EPS) + decay * p)
                p.grad = None
    return losses


# ---- ppctl ----------------------------------------------------------------------------------

def ppctl_train(ppctl, work, name, data, hf):
    """`ppctl train` of the packed spec (microbatchSize unset: 1). Its STEP LOSS lines."""
    spec = {"name": name,
            "model": {"vocabSize": dm.V, "seqLen": T, "dModel": dm.C, "nHeads": dm.NH,
                      "nLayers": dm.L, "initFrom": hf, "positions": "document"},
            "parallel": {"pipeline": 1, "schedule": "1f1b"},
            "train": dict(TRAIN, steps=STEPS, microbatches=M, tokensPerMicrobatch=K),
            "data": {"path": data, "format": "bytes", "documents": "mask"}}
    return dm.run_ppctl_train(ppctl, work, name, spec)


# ---- the checks -----------------------------------------------------------------------------

def check_packing(packed, lengths):
    """The packing is the rule's, and not degenerate on the rows the steps train."""
    stream = packed.stream
    ok_seq = all(packed.row(g)[2] == [a - packed.starts[g] for a, _ in packed.pieces[g]] +
                 [packed.starts[g + 1] - packed.starts[g]] for g in range(packed.count))
    check(ok_seq, "RowSequences of every row are the pieces the packer put in it")
    all_lengths = [packed.starts[g + 1] - packed.starts[g] for g in range(packed.count)]
    check(all(1 <= n <= K for n in all_lengths) and
          all(b - a <= LIMIT for row in packed.pieces for a, b in row),
          f"rows hold 1..{K} tokens, pieces at most {LIMIT}")
    # Greedy: a row's next piece would not have fitted.
    greedy = all(all_lengths[g] + (packed.pieces[g + 1][0][1] - packed.pieces[g + 1][0][0]) > K
                 for g in range(packed.count - 1))
    check(greedy, "rows are packed greedily (each next piece would exceed K)")
    trained = sorted({g for step in range(STEPS) for g in packed.step_rows(step)})
    lens = [all_lengths[g] for g in trained]
    n_pieces = [len(packed.pieces[g]) for g in trained]
    print(f"  {packed.count} rows of {min(all_lengths)}..{max(all_lengths)} tokens; the "
          f"{STEPS} steps train {len(trained)} of them, {min(lens)}..{max(lens)} tokens, "
          f"{min(n_pieces)}..{max(n_pieces)} pieces")
    check(len(set(lens)) >= 5 and max(lens) - min(lens) >= 8,
          f"the trained rows differ in length ({sorted(set(lens))})")
    check(len(set(sum(all_lengths[g] for g in packed.step_rows(k)) for k in range(STEPS))) > 1,
          "the steps differ in tokens")
    check(sum(n >= 2 for n in n_pieces) >= len(trained) // 2,
          f"most trained rows hold several pieces ({n_pieces})")
    long_docs = sum(n + 1 > T for n in lengths)
    trained_pieces = [pc for g in trained for pc in packed.pieces[g]]
    cut = [(a, b) for a, b in trained_pieces if b - a == LIMIT and stream[b - 1] != EOT]
    continued = [(a, b) for a, b in trained_pieces if a > 0 and stream[a - 1] != EOT]
    eot_alone = [(a, b) for a, b in trained_pieces if b - a == 1 and stream[a] == EOT]
    print(f"  {long_docs} documents longer than seq_len {T}; trained pieces: {len(cut)} cut at "
          f"{LIMIT} tokens, {len(continued)} continuing a document, {len(eot_alone)} of an EOT "
          f"alone")
    check(long_docs >= 1 and cut and continued,
          "a document longer than seq_len is split into pieces, and the steps train them")
    check(any(packed.starts[g] > 0 and stream[packed.starts[g] - 1] != EOT for g in trained),
          "a trained row starts inside a document (on a piece boundary)")
    check(bool(eot_alone), "a trained row holds a one-token piece (an EOT alone)")


def check_rows_equal_pieces(w64, packed):
    """(a): every row's masked per-token losses equal its pieces run alone, float64."""
    err, diff = 0.0, 0.0
    for g in range(packed.count):
        x, y, cu = packed.row(g)
        ours = row_losses(w64, x, y, cu)
        alone = pieces_alone(w64, x, y, cu)
        err = max(err, float(((ours - alone).abs() / alone.abs()).max()))
        if len(cu) > 2:
            plain = row_losses(w64, x, y, cu, across=True)
            diff = max(diff, float(((plain - alone).abs() / alone.abs()).max()))
    print(f"  (a) packed rows vs their pieces alone, float64: max relative error {err:.3e} over "
          f"{packed.count} rows")
    check(err <= 1e-9, f"(a) packed rows equal their pieces run alone ({err:.3e} <= 1e-9)")
    print(f"  (a) rows without the block mask vs pieces alone: max relative difference {diff:.3e}")
    check(diff > 1e-3, f"(a) without the block mask the losses differ ({diff:.3e} > 1e-3)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ppctl", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    torch.set_num_threads(1)
    t0 = time.time()
    print(f"torch {torch.__version__}")
    work = tempfile.mkdtemp(prefix="packed_torch_test.")
    try:
        corpus, lengths = make_corpus()
        data = os.path.join(work, "docs.bin")
        with open(data, "wb") as f:
            f.write(corpus)
        weights = dm.init_weights()
        hf = os.path.join(work, "hf")
        dm.save_hf(weights, hf)
        w64 = {k: v.double() for k, v in weights.items()}
        packed = Packed(corpus)
        print(f"corpus {len(corpus)} bytes, {len(lengths)} documents of {min(lengths)}.."
              f"{max(lengths)} bytes; T={T} K={K} L={LIMIT} M={M}, {STEPS} steps")

        check_packing(packed, lengths)
        check_rows_equal_pieces(w64, packed)

        # (b) float64: the reference's first step two ways.
        ref64 = reference_train(weights, packed, torch.float64)
        rows = [packed.row(g) for g in packed.step_rows(0)]
        n1 = sum(x.shape[1] for x, _, _ in rows)
        alone1 = sum(float(pieces_alone(w64, x, y, cu).sum()) for x, y, cu in rows) / n1
        e = rel(ref64[0], alone1)
        print(f"  (b) step 1 float64: masked rows {ref64[0]:.15f} vs pieces alone "
              f"{alone1:.15f} ({n1} tokens in rows of {[x.shape[1] for x, _, _ in rows]}): "
              f"relative error {e:.3e}")
        check(e <= 1e-9, f"(b) float64 first-step loss equals its pieces-alone value ({e:.3e})")

        # What the comparisons must tell apart: unpacked training of the same corpus (fixed
        # windows of T, documents "mask"), the rows without the block mask (positions still per
        # piece), the mean of the microbatch means instead of the token mean. Step 1 apart by
        # 10x (b)'s tolerance or more, the 10 steps by 100x (c)'s.
        others = {"unpacked": dm.reference_train(weights, corpus, "mask", "document",
                                                 torch.float64),
                  "unmasked": reference_train(weights, packed, torch.float64, across=True),
                  "rows-alike": reference_train(weights, packed, torch.float64,
                                                weighting="rows")}
        for what, other in others.items():
            d1 = rel(other[0], ref64[0])
            d = max(rel(a, b) for a, b in zip(other, ref64))
            print(f"      {what} reference: step 1 {other[0]:.12f} ({d1:.3e} from the packed "
                  f"reference), {STEPS} steps up to {d:.3e} from it")
            check(d1 > 1e-5 and d > 1e-3, f"the {what} reference differs from the packed one "
                                          f"(step 1 {d1:.3e} > 1e-5, steps {d:.3e} > 1e-3)")

        try:
            ours = ppctl_train(args.ppctl, work, "packed", data, hf)
        except (RuntimeError, subprocess.TimeoutExpired) as ex:
            check(False, f"(b) ppctl train: {ex}")
            ours = None
        if ours is not None:
            e1 = rel(ours[0], ref64[0])
            print(f"  (b) step 1 ours {ours[0]:.12f} vs float64 {ref64[0]:.12f}: relative error "
                  f"{e1:.3e}")
            check(e1 <= 1e-6, f"(b) first-step loss within 1e-6 of float64 ({e1:.3e})")
            ref32 = reference_train(weights, packed, torch.float32)
            e64 = [rel(o, r) for o, r in zip(ours, ref64)]
            e32 = [rel(o, r) for o, r in zip(ours, ref32)]
            for k in range(STEPS):
                print(f"      step {k + 1:2d}: ours {ours[k]:.9f}  float64 {ref64[k]:.9f} "
                      f"({e64[k]:.2e})  float32 {ref32[k]:.9f} ({e32[k]:.2e})")
            print(f"  (c) {STEPS} fp32 steps vs float64 reference: max relative error "
                  f"{max(e64):.3e} (vs an fp32 reference: {max(e32):.3e})")
            check(max(e64) <= 1e-5, f"(c) every step within 1e-5 of float64 ({max(e64):.3e})")
            check(ours[-1] < ours[0] - 0.1,
                  f"(c) the loss falls ({ours[0]:.4f} -> {ours[-1]:.4f})")
            for what, other in others.items():
                d = max(rel(a, b) for a, b in zip(other, ours))
                check(d > 1e-3, f"(c) {what} reference steps differ from ours ({d:.3e} > 1e-3)")
    finally:
        if args.keep:
            print("work folder kept:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{len(dm.FAILURES)} failure(s); {time.time() - t0:.1f} s")
    sys.exit(1 if dm.FAILURES else 0)


if __name__ == "__main__":
    main()
