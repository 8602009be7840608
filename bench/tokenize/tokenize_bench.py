#!/usr/bin/env python3
"""Tokenizer throughput on one core: `ppctl tokenize --threads=1` next to Hugging Face `tokenizers`.

Both encode the same documents (Debian's license texts: /usr/share/common-licenses/* and
/usr/share/doc/*/copyright, about 20 MB, one document per file) with the same byte-level BPE
(trained here with `tokenizers`, or --tokenizer=DIR), pinned to one core (taskset), in alternating
runs; the figures are medians. Ours is the whole `ppctl tokenize` process (load, read, encode,
write the shards); `tokenizers` is only its encode_batch or encode_batch_fast call
(RAYON_NUM_THREADS=1), so the comparison leans its way. The ids are checked equal once (our shards against `tokenizers` with
<|endoftext|> before each document).

Run with the Hugging Face venv's python (make tokenize-bench does):
  tokenize_bench.py --ppctl build/bin/ppctl [--repeats 5] [--vocab 32000] [--tokenizer DIR]
"""
import argparse
import glob
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

EOT = "<|endoftext|>"


def cpu_model():
    out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def corpus(max_mb):
    paths = sorted(p for p in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(p))
    paths += sorted(p for p in glob.glob("/usr/share/doc/*/copyright") if os.path.isfile(p))
    chosen, total = [], 0
    for p in paths:
        size = os.path.getsize(p)
        if total + size > max_mb * 1e6:
            break
        chosen.append(p)
        total += size
    return chosen, total


def texts_of(paths):
    return [open(p, "rb").read().decode("utf-8", "replace") for p in paths]


def train(paths, vocab, folder):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts_of(paths), trainer)
    tok.save(os.path.join(folder, "tokenizer.json"))


def hf_worker(folder, list_file, method):
    """Runs in a pinned child: prints the seconds of one `method` call on every document."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    texts = texts_of(open(list_file).read().split("\n"))
    start = time.perf_counter()
    getattr(tok, method)(texts, add_special_tokens=False)
    print(time.perf_counter() - start)


def run_ours(ppctl, core, folder, paths, out_dir):
    for name in os.listdir(out_dir):
        os.unlink(os.path.join(out_dir, name))
    cmd = ["taskset", "-c", str(core), ppctl, "tokenize", f"--tokenizer={folder}", "--threads=1",
           os.path.join(out_dir, "bench")] + paths
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def run_hf(core, folder, list_file, method):
    env = dict(os.environ, RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    cmd = ["taskset", "-c", str(core), sys.executable, __file__, "--hf-worker", folder, list_file,
           method]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return float(out.stdout.strip().split("\n")[-1])


def same_ids(folder, paths, out_dir):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    eot = tok.token_to_id(EOT)
    want = []
    for enc in tok.encode_batch(texts_of(paths), add_special_tokens=False):
        want += [eot] + enc.ids
    got = []
    for name in sorted(os.listdir(out_dir)):
        data = open(os.path.join(out_dir, name), "rb").read()
        n = struct.unpack("<3i", data[:12])[2]
        got += struct.unpack(f"<{n}H", data[1024:])
    return got == want, len(want)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--hf-worker":
        hf_worker(sys.argv[2], sys.argv[3], sys.argv[4])
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("--ppctl", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--max_mb", type=float, default=20)
    parser.add_argument("--core", type=int, default=0)
    parser.add_argument("--tokenizer", help="a folder with tokenizer.json (default: train one)")
    args = parser.parse_args()
    import tokenizers
    paths, total = corpus(args.max_mb)
    mb = total / 1e6
    print(f"tokenize bench: {cpu_model()}, one core (taskset -c {args.core}), {len(paths)} "
          f"documents, {mb:.1f} MB, tokenizers {tokenizers.__version__}, {args.repeats} runs each")
    with tempfile.TemporaryDirectory() as work:
        folder = args.tokenizer
        if folder is None:
            folder = os.path.join(work, "tok")
            os.makedirs(folder)
            start = time.perf_counter()
            train(paths, args.vocab, folder)
            vocab = len(json.load(open(os.path.join(folder, "tokenizer.json")))["model"]["vocab"])
            print(f"tokenizer: byte-level BPE of {vocab} tokens trained on the same text "
                  f"({time.perf_counter() - start:.1f} s)")
        list_file = os.path.join(work, "files.txt")
        with open(list_file, "w") as f:
            f.write("\n".join(paths))
        out_dir = os.path.join(work, "out")
        os.makedirs(out_dir)
        # encode_batch_fast (tokenizers >= 0.21) skips the offsets: their fastest call.
        runs = {"ours": [], "encode_batch": [], "encode_batch_fast": []}
        for _ in range(args.repeats):
            runs["ours"].append(run_ours(args.ppctl, args.core, folder, paths, out_dir))
            for method in ("encode_batch", "encode_batch_fast"):
                runs[method].append(run_hf(args.core, folder, list_file, method))
        equal, n = same_ids(folder, paths, out_dir)
    names = {"ours": "ppctl tokenize --threads=1 (whole process)",
             "encode_batch": "tokenizers encode_batch, 1 thread",
             "encode_batch_fast": "tokenizers encode_batch_fast, 1 thread"}
    for key, secs in runs.items():
        print(f"  {names[key]:44s} {mb / statistics.median(secs):7.2f} MB/s  (median; "
              f"{mb / max(secs):.2f}-{mb / min(secs):.2f})")
    best = min(statistics.median(runs["encode_batch"]), statistics.median(runs["encode_batch_fast"]))
    print(f"  ours / tokenizers' faster call: {best / statistics.median(runs['ours']):.2f}x; "
          f"ids equal: {'yes' if equal else 'NO'} ({n} tokens)")
    try:
        import tiktoken  # noqa: F401
        print("  tiktoken gpt2: skipped (needs its BPE file from the network; this bench is "
              "offline)")
    except ImportError:
        print("  tiktoken gpt2: skipped (tiktoken is not installed, and its gpt2 BPE file would "
              "come from the network)")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
