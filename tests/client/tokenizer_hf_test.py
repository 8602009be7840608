#!/usr/bin/env python3
"""common/tokenizer.h against Hugging Face `tokenizers` (the hf_venv fixture's, 0.23.3).

Trains a small byte-level BPE with `tokenizers` on a text every Debian machine has, saves it as
tokenizer.json and as vocab.json + merges.txt, and checks that our ids equal `tokenizers`' ids on
that whole text and on a list of hard strings, in every pre-tokenizer setting we accept; that
Decode(Encode(x)) == x; and that `ppctl tokenize` writes llm.c shards holding those ids, the same
for any thread count, split at --shard_tokens.

Usage: tokenizer_hf_test.py --ids TOKENIZER_IDS --ppctl PPCTL
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

CORPUS = "/usr/share/common-licenses/GPL-3"
EOT = "<|endoftext|>"

# Each is a str (checked as is) or bytes (invalid UTF-8: `tokenizers` gets Python's
# decode("utf-8", "replace") of it, which is what Encode promises to read).
HARD = [
    "", " ", "  ", "\t", "\n", "\r\n", "a", "hello world", "Hello, World!",
    "e\u0301 n\u0303 a\u0308\u0304 \u0915\u094d\u0937",   # combining marks, Devanagari virama
    "\U0001F600 \U0001F44D\U0001F3FD \U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466",
    "\U0001F3F3\uFE0F\u200D\U0001F308 \u2764\uFE0F",       # ZWJ flag, variation selector
    "\u4f60\u597d\uff0c\u4e16\u754c\u3002 \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\ud55c\uad6d\uc5b4 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e2\u05d1\u05e8\u05d9\u05ea",
    "tab\there\t\tand\r\nnewlines\n\n\nend", "no\u00a0break\u00a0space", "ideo\u3000space",
    "trailing spaces   ", "   leading", "runs     of      spaces before words",
    "\u2003em\u2009thin\u200aspace\u2028line\u2029para\u205fmath\u1680ogham\u0085nel",
    "\u200bzero width\u200b is not white space", "\u000b\u000c vertical",
    "abc123 123abc 3.14159 1,000,000 \u0661\u0662\u0663 \u00bd \u2167 x\u00b2",
    "it's I'LL we're you've I'm he'd they'll don't O'Neil 'quoted' ''s",
    "text" + EOT + "more", EOT, EOT + EOT, " " + EOT + " ", "a" + EOT + " b" + EOT + "\n",
    "<|endoftext", "<|endoftext|", "<||endoftext|>|>", "\ufffd replacement", "\x00nul\x01ctl\x7f",
    "a" * 300, " " * 300 + "x", "\u00e9" * 200, "1" * 500, "!?" * 150,
    "mixed \u00e9t\u00e9 caf\u00e9 na\u00efve \u00dcber stra\u00dfe",
    "\U00010348\U0001D54F\U0001F9D1\u200D\U0001F4BB",      # astral letters
    "   \n  \t ", "a\u00a0\u00a0b", " \u3000\u3000x",
    b"\xff\xfe bad", b"ok \xe2\x82 cut", b"\xc0\xaf overlong", b"\xed\xa0\x80 surrogate",
    b"\xf0\x9f\x98", b"\xf4\x90\x80\x80 too big", b"abc\x80\x80\x80def", b"\xe0\x80\x80",
    b"\xf0\x80\x80\x80", b"end \xc3",
]


def train(text, workdir):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer)
    return tok


def save_variant(workdir, name, base_json, edit):
    """A tokenizer.json variant: `edit` changes the parsed JSON in place."""
    folder = os.path.join(workdir, name)
    os.makedirs(folder)
    data = json.loads(base_json)
    edit(data)
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    return folder, Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))


def as_text(case):
    return case.decode("utf-8", "replace") if isinstance(case, bytes) else case


def as_bytes(case):
    return case if isinstance(case, bytes) else case.encode("utf-8")


def our_ids(ids_bin, folder, cases):
    stdin = "".join(as_bytes(c).hex() + "\n" for c in cases)
    out = subprocess.run([ids_bin, folder], input=stdin, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise AssertionError(f"tokenizer_ids {folder}: {out.stderr.strip()}")
    lines = out.stdout.split("\n")
    result = []
    for i in range(len(cases)):
        ids = [int(t) for t in lines[2 * i].split()]
        result.append((ids, bytes.fromhex(lines[2 * i + 1])))
    return result


def check_folder(ids_bin, name, folder, hf, cases, round_trip=True):
    failures = 0
    ours = our_ids(ids_bin, folder, cases)
    for case, (ids, decoded) in zip(cases, ours):
        want = hf.encode(as_text(case), add_special_tokens=False).ids
        if ids != want:
            failures += 1
            print(f"FAIL {name}: {as_text(case)[:60]!r}\n  ours {ids[:40]}\n  hf   {want[:40]}")
        elif round_trip and decoded != as_text(case).encode("utf-8"):
            failures += 1
            print(f"FAIL {name}: decode {as_text(case)[:60]!r} gave {decoded[:80]!r}")
    print(f"{name}: {len(cases)} cases, {failures} failures")
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ids", required=True)
    parser.add_argument("--ppctl", required=True)
    args = parser.parse_args()
    with open(CORPUS, encoding="utf-8") as f:
        corpus = f.read()
    cases = HARD + [corpus] + [line for line in corpus.split("\n")[:400]]
    hard_text = "\n".join(as_text(c) for c in HARD)
    failures = 0
    with tempfile.TemporaryDirectory() as workdir:
        tok = train(corpus + hard_text, workdir)
        base_json = tok.to_str()
        variants = {
            "json": lambda d: None,
            "json_prefix_space": lambda d: d["pre_tokenizer"].update(add_prefix_space=True),
            "json_no_regex": lambda d: d["pre_tokenizer"].update(use_regex=False),
            "json_string_merges": lambda d: d["model"].update(
                merges=[" ".join(m) if isinstance(m, list) else m for m in d["model"]["merges"]]),
        }
        for name, edit in variants.items():
            folder, hf = save_variant(workdir, name, base_json, edit)
            # add_prefix_space puts a space the text lacked in front of it: no round trip.
            failures += check_folder(args.ids, name, folder, hf, cases,
                                     round_trip=name != "json_prefix_space")
        # GPT-2's original layout: vocab.json + merges.txt, <|endoftext|> special.
        files_dir = os.path.join(workdir, "files")
        os.makedirs(files_dir)
        vocab, merges = tok.model.save(files_dir)
        hf = Tokenizer(models.BPE.from_file(vocab, merges))
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.add_special_tokens([EOT])
        failures += check_folder(args.ids, "vocab_merges", files_dir, hf, cases)
        failures += check_ppctl(args.ppctl, workdir, os.path.join(workdir, "json"), tok)
    if failures:
        print(f"{failures} failures")
        return 1
    print("PASS")
    return 0


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    assert header[0] == 20240520 and header[1] == 1, (path, header[:3])
    n = header[2]
    assert len(data) == 1024 + 2 * n, (path, n, len(data))
    return list(struct.unpack(f"<{n}H", data[1024:]))


def check_ppctl(ppctl, workdir, folder, tok):
    """ppctl tokenize: documents each preceded by <|endoftext|>, shards of --shard_tokens."""
    if not ppctl:
        return 0
    docs = []
    corpus = open(CORPUS, "rb").read()
    # Over ppctl's 1 MiB chunk: one document encoded in pieces cut after newlines.
    big = b"".join(corpus.replace(b"License", b"License%d" % i) for i in range(40))
    for i, case in enumerate(HARD[:30] + [corpus, big]):
        path = os.path.join(workdir, f"doc{i}.txt")
        with open(path, "wb") as f:
            f.write(as_bytes(case))
        docs.append((path, as_text(case)))
    eot = tok.token_to_id(EOT)
    want = []
    for _, text in docs:
        want += [eot] + tok.encode(text, add_special_tokens=False).ids
    failures = 0
    outputs = {}
    for threads in (1, 2):
        out_dir = os.path.join(workdir, f"out{threads}")
        os.makedirs(out_dir)
        cmd = [ppctl, "tokenize", f"--tokenizer={folder}", "--shard_tokens=5000",
               f"--threads={threads}", os.path.join(out_dir, "shard")] + [p for p, _ in docs]
        run = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            print(f"FAIL ppctl tokenize --threads={threads}: {run.stderr.strip()}")
            return 1
        names = sorted(os.listdir(out_dir))
        expected_names = [f"shard_{i:06d}.bin" for i in range((len(want) + 4999) // 5000)]
        if names != expected_names:
            print(f"FAIL ppctl tokenize shards {names} != {expected_names}")
            failures += 1
        shards = [read_shard(os.path.join(out_dir, n)) for n in names]
        if any(len(s) != 5000 for s in shards[:-1]):
            print(f"FAIL ppctl tokenize shard sizes {[len(s) for s in shards]}")
            failures += 1
        got = [t for s in shards for t in s]
        if got != want:
            first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
            print(f"FAIL ppctl tokenize ids differ (lengths {len(got)}, {len(want)}; first {first})")
            failures += 1
        outputs[threads] = [open(os.path.join(out_dir, n), "rb").read() for n in names]
    if outputs[1] != outputs[2]:
        print("FAIL ppctl tokenize: --threads=1 and --threads=2 differ")
        failures += 1
    failures += check_ppctl_edges(ppctl, workdir, folder, docs[0][0], tok)
    print(f"ppctl tokenize: {len(want)} tokens, {failures} failures")
    return failures


def check_ppctl_edges(ppctl, workdir, folder, doc, tok):
    """stdin as a document; errors are one line and a non-zero exit, leaving no shard."""
    failures = 0
    prefix = os.path.join(workdir, "stdin", "s")
    run = subprocess.run([ppctl, "tokenize", f"--tokenizer={folder}", prefix, "-"],
                         input=b"hello world\n", capture_output=True, check=False)
    want = [tok.token_to_id(EOT)] + tok.encode("hello world\n").ids
    if run.returncode != 0 or read_shard(prefix + "_000000.bin") != want:
        print(f"FAIL ppctl tokenize from stdin: {run.stderr!r}")
        failures += 1
    broken = os.path.join(workdir, "broken")
    os.makedirs(broken)
    with open(os.path.join(broken, "tokenizer.json"), "w") as f:
        f.write("{not json")
    missing = os.path.join(workdir, "no-such-file.txt")
    cases = [
        ([f"--tokenizer={folder}", doc, missing], missing),
        ([f"--tokenizer={broken}", doc], "tokenizer.json"),
        ([f"--tokenizer={folder}", "--shard_tokens=0", doc], "--shard_tokens"),
    ]
    for i, (args, needle) in enumerate(cases):
        out_dir = os.path.join(workdir, f"error{i}")
        args.insert(-2 if args[-1] == missing else -1, os.path.join(out_dir, "x"))
        run = subprocess.run([ppctl, "tokenize"] + args, capture_output=True, text=True,
                             check=False)
        lines = run.stderr.strip().split("\n")
        shards = os.listdir(out_dir) if os.path.isdir(out_dir) else []
        if run.returncode == 0 or len(lines) != 1 or needle not in lines[0] or shards:
            print(f"FAIL ppctl tokenize {args}: rc {run.returncode}, {run.stderr!r}, {shards}")
            failures += 1
    return failures


if __name__ == "__main__":
    sys.exit(main())
