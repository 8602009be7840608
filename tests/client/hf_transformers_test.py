"""ppctl export / import against transformers' GPT2LMHeadModel (PyPI torch + transformers, CPU).

- An exported checkpoint (untied and tied, single-process, PP=2 and TP=2 layouts) loads with
  from_pretrained with no missing, unexpected or mismatched tensors, and its logits on a fixed
  batch equal ours (tests/worker/trainer/sample_logits) within 1e-4 relative.
- PP=2 is bitwise the single-process trainer, so its export is byte for byte the same file.
- export -> import -> export is bitwise identical (ppctl import trains one step at lr 0).
- A randomly initialised GPT2LMHeadModel saved by transformers imports, gives transformers'
  logits, and trains (its loss falls).
- A padded model (vocab 320, 300 real ids) with a tokenizer (a small byte-level BPE trained here
  with `tokenizers`) exports GPT-2's shape (300 rows) and the tokenizer files:
  AutoTokenizer.from_pretrained gives the tokenizer's ids, the logits equal ours on the real
  columns, ppctl sample prints text through it, and import --pad_vocab_to=64 -> export gives
  the same bytes.
- Bad inputs are refused with one line naming the problem.

Nothing here touches the network: the models are made locally, from_pretrained reads a folder.
Usage: hf_transformers_test.py --ppctl PATH --logits PATH
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import tokenizers
import torch
import transformers

ARGS = None
SEQ = 16
BATCH = ["The quick brown ", "fox jumps over t"]  # two sequences of SEQ bytes


def spec(name, tied=False, **model):
    m = {"vocabSize": 256, "seqLen": SEQ, "dModel": 32, "nHeads": 4, "nLayers": 2,
         "tieEmbeddings": tied}
    m.update(model)
    return {
        "name": name,
        "model": m,
        "parallel": {"pipeline": 1, "schedule": "1f1b"},
        "train": {"steps": 6, "microbatches": 2, "microbatchSize": 2, "lr": 0.01, "seed": 3},
        "data": {"format": "generated", "generatedTokens": 20000},
        "checkpoint": {"everySteps": 6},
    }


class HfTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="hf_transformers_test.")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def ppctl(self, *args, ok=True, timeout=300):
        r = subprocess.run([ARGS.ppctl, *args], capture_output=True, text=True, timeout=timeout)
        if ok:
            self.assertEqual(r.returncode, 0, f"ppctl {' '.join(args)}:\n{r.stdout}\n{r.stderr}")
        return r

    def write_spec(self, s, name):
        p = self.path(name + ".json")
        with open(p, "w") as f:
            json.dump(s, f)
        return p

    def train(self, s):
        """Trains spec `s` in one process; its newest step folder and its losses."""
        out = self.ppctl("train", self.write_spec(s, s["name"]),
                         "--checkpoint_dir=" + self.path("ckpt"))
        losses = [float(x) for x in re.findall(r"^step \d+/\d+ loss (\S+)", out.stdout, re.M)]
        steps = sorted(glob.glob(self.path("ckpt", s["name"], "step-*")))
        return steps[-1], losses

    def up(self, s, workers):
        """Runs spec `s` on a local cluster of `workers` workers; its newest step folder."""
        data = self.path("up-" + s["name"])
        self.ppctl("up", f"--workers={workers}", "--job=" + self.write_spec(s, s["name"]),
                   "--data_dir=" + data)
        steps = sorted(glob.glob(os.path.join(data, "checkpoints", "*", "step-*")))
        self.assertTrue(steps, "ppctl up wrote no checkpoint")
        return steps[-1]

    def ours(self, step_dir, vocab=256):
        """Our logits (B, T, V) on BATCH (V: the real vocabulary)."""
        rows = []
        for text in BATCH:
            out = self.path("logits.bin")
            subprocess.run([ARGS.logits, step_dir, text, out], check=True, timeout=60)
            rows.append(np.fromfile(out, dtype=np.float32).reshape(SEQ, vocab))
        return np.stack(rows)

    def hf_model(self, folder):
        model, info = transformers.GPT2LMHeadModel.from_pretrained(
            folder, output_loading_info=True)
        for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            self.assertFalse(info.get(key), f"{folder}: {key} {info.get(key)}")
        return model.eval()

    def theirs(self, model):
        ids = torch.tensor([[b for b in t.encode()] for t in BATCH], dtype=torch.long)
        with torch.no_grad():
            return model(input_ids=ids).logits.numpy()

    def assert_close(self, ours, theirs):
        self.assertEqual(ours.shape, theirs.shape)
        scale = np.max(np.abs(theirs))
        err = np.max(np.abs(ours - theirs)) / scale
        self.assertLess(err, 1e-4, f"max |ours - transformers| / max |transformers| = {err:.2e}")
        print(f"  logits: max relative difference {err:.2e} (scale {scale:.3f})")

    def export(self, step_dir, name):
        out = self.path(name)
        self.ppctl("export", step_dir, out, "--format=hf-gpt2")
        return out

    def test_export_loads_in_transformers_with_our_logits(self):
        for tied in (False, True):
            step_dir, _ = self.train(spec("t" if tied else "u", tied))
            folder = self.export(step_dir, "hf-" + ("tied" if tied else "untied"))
            model = self.hf_model(folder)
            self.assertEqual(model.config.tie_word_embeddings, tied)
            self.assert_close(self.ours(step_dir), self.theirs(model))

    def test_every_layout_exports(self):
        single, _ = self.train(spec("one"))
        pp2 = spec("pp2")
        pp2["parallel"] = {"pipeline": 2, "schedule": "1f1b"}
        pp_dir = self.up(pp2, 2)
        a, b = self.export(single, "hf-one"), self.export(pp_dir, "hf-pp2")
        with open(os.path.join(a, "model.safetensors"), "rb") as fa, \
                open(os.path.join(b, "model.safetensors"), "rb") as fb:
            self.assertEqual(fa.read(), fb.read(), "PP=2 export differs from single-process")
        tp2 = spec("tp2")
        tp2["parallel"] = {"pipeline": 1, "tensor": 2, "schedule": "1f1b"}
        tp_dir = self.up(tp2, 2)
        self.assert_close(self.ours(tp_dir), self.theirs(self.hf_model(self.export(tp_dir, "hf-tp2"))))

    def import_(self, folder, s, extra=()):
        """ppctl import FOLDER --job=S: trains S from the folder's weights; its losses."""
        out = self.ppctl("import", folder, "--job=" + self.write_spec(s, s["name"]),
                         "--checkpoint_dir=" + self.path("ckpt"), *extra)
        return [float(x) for x in re.findall(r"^step \d+/\d+ loss (\S+)", out.stdout, re.M)]

    def test_export_import_export_is_bitwise(self):
        step_dir, _ = self.train(spec("a"))
        first = self.export(step_dir, "hf-a")
        # The spec leaves the model sizes out: import takes them from config.json. One step at
        # lr 0 keeps the imported weights, so its checkpoint exports to the same bytes.
        s = spec("a2")
        s["model"] = {}
        s["train"].update({"steps": 1, "lr": 0})
        s["checkpoint"] = {"everySteps": 1}
        self.import_(first, s)
        second = self.export(self.path("ckpt", "a2", "step-1"), "hf-a2")
        for f in ("config.json", "model.safetensors"):
            with open(os.path.join(first, f), "rb") as x, open(os.path.join(second, f), "rb") as y:
                self.assertEqual(x.read(), y.read(), f)

    def test_a_transformers_model_imports_and_trains(self):
        torch.manual_seed(0)
        # transformers' defaults otherwise: tied, gelu_new, eps 1e-5 (dropout is off in eval).
        config = transformers.GPT2Config(vocab_size=256, n_positions=SEQ, n_embd=32, n_layer=2,
                                         n_head=4, bos_token_id=None, eos_token_id=None)
        model = transformers.GPT2LMHeadModel(config).eval()
        folder = self.path("hf-random")
        model.save_pretrained(folder)
        s = spec("r", tied=True)
        s["train"].update({"steps": 1, "lr": 0})
        s["checkpoint"] = {"everySteps": 1}
        self.import_(folder, s)
        self.assert_close(self.ours(self.path("ckpt", "r", "step-1")), self.theirs(model))
        s = spec("r20", tied=True)
        s["train"].update({"steps": 20, "lr": 0.01})
        losses = self.import_(folder, s)
        self.assertEqual(len(losses), 20)
        self.assertLess(losses[-1], losses[0] - 0.5, f"losses {losses}")
        print(f"  imported model trains: loss {losses[0]:.4f} -> {losses[-1]:.4f}")

    def bpe_tokenizer(self, vocab):
        """A byte-level BPE of `vocab` ids (<|endoftext|> among them) trained on this file: its
        folder, holding tokenizer.json and vocab.json + merges.txt."""
        bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
        bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = tokenizers.decoders.ByteLevel()
        trainer = tokenizers.trainers.BpeTrainer(
            vocab_size=vocab, special_tokens=["<|endoftext|>"], show_progress=False,
            initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
        with open(__file__) as f:  # text enough for the merges
            bpe.train_from_iterator([f.read()], trainer)
        folder = self.path("tokenizer")
        os.makedirs(folder)
        bpe.save(os.path.join(folder, "tokenizer.json"))
        bpe.model.save(folder)
        return folder, bpe

    def test_padded_model_exports_gpt2_shape_and_its_tokenizer(self):
        tok_dir, bpe = self.bpe_tokenizer(300)
        s = spec("pad", vocabSize=320, realVocabSize=300)
        s["data"]["tokenizer"] = tok_dir
        step_dir, _ = self.train(s)
        folder = self.export(step_dir, "hf-pad")
        for f in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
            self.assertTrue(os.path.exists(os.path.join(folder, f)), f)
        model = self.hf_model(folder)
        self.assertEqual(model.config.vocab_size, 300)
        self.assert_close(self.ours(step_dir, 300), self.theirs(model))
        auto = transformers.AutoTokenizer.from_pretrained(folder)
        text = "The quick brown"
        self.assertEqual(auto(text).input_ids, bpe.encode(text).ids)
        self.assertEqual(auto.eos_token, "<|endoftext|>")
        # The text is the ids' bytes, which an untrained model need not make valid UTF-8.
        out = subprocess.run([ARGS.ppctl, "sample", step_dir, "--prompt=The", "--tokens=4",
                              "--temperature=0"], capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.startswith(b"The"), out.stdout)
        # Back in with zero padding rows, out again: the real rows are the same bytes.
        again = spec("pad2")
        again["model"] = {}
        again["train"].update({"steps": 1, "lr": 0})
        again["checkpoint"] = {"everySteps": 1}
        self.import_(folder, again, ["--pad_vocab_to=64"])
        second = self.export(self.path("ckpt", "pad2", "step-1"), "hf-pad2")
        for f in ("config.json", "model.safetensors"):
            with open(os.path.join(folder, f), "rb") as x, open(os.path.join(second, f), "rb") as y:
                self.assertEqual(x.read(), y.read(), f)

    def test_bad_inputs_are_refused_with_one_line(self):
        step_dir, _ = self.train(spec("b"))
        good = self.export(step_dir, "hf-b")

        def refused(args, want):
            r = self.ppctl(*args, ok=False)
            self.assertNotEqual(r.returncode, 0)
            lines = r.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, r.stderr)
            self.assertIn(want, lines[0])

        refused(["export", step_dir, self.path("x"), "--format=onnx"], "--format must be hf-gpt2")
        refused(["export", self.path("nothing"), self.path("x"), "--format=hf-gpt2"],
                "not a checkpoint")
        wrong_vocab = spec("v", vocabSize=512)
        refused(["import", good, "--job=" + self.write_spec(wrong_vocab, "v")],
                "model.vocab_size: the spec says 512")
        bad = self.path("hf-gelu")
        shutil.copytree(good, bad)
        with open(os.path.join(bad, "config.json")) as f:
            config = json.load(f)
        config["activation_function"] = "gelu"
        with open(os.path.join(bad, "config.json"), "w") as f:
            json.dump(config, f)
        refused(["import", bad, "--job=" + self.write_spec(spec("g"), "g")],
                "activation_function must be \"gelu_new\"")
        shutil.copy(os.path.join(good, "config.json"), bad)
        os.remove(os.path.join(bad, "model.safetensors"))
        refused(["import", bad, "--job=" + self.write_spec(spec("g"), "g")], "model.safetensors")
        # Sampling a vocab-256 model through a tokenizer of more ids than that.
        tok_dir, _ = self.bpe_tokenizer(300)
        refused(["sample", step_dir, "--prompt=x", "--tokenizer=" + tok_dir],
                "has 300 ids, more than the model's vocabulary of 256")


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--ppctl", required=True)
    parser.add_argument("--logits", required=True)
    ARGS, rest = parser.parse_known_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    torch.set_num_threads(1)
    result = unittest.main(argv=[sys.argv[0], "-v", *rest], exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
