"""Submit a job to a secure cluster, wait, print its history and logs, export TensorBoard scalars.
Usage: quickstart.py [ADDRESS CA TOKEN_FILE [LOGDIR]]; default $PP_ADDRESS $PP_CA $PP_TOKEN_FILE."""
import os, sys
from pipeline_client import Client, state_name

address, ca, token_file = sys.argv[1:4] or [os.environ[v] for v in ("PP_ADDRESS", "PP_CA", "PP_TOKEN_FILE")]
client = Client(address, ca=ca, token_file=token_file)
job = client.submit({"name": "quickstart", "parallel": {"pipeline": 1, "schedule": "1f1b"},
                     "model": {"vocab_size": 256, "seq_len": 32, "d_model": 32, "n_heads": 2, "n_layers": 2},
                     "train": {"steps": 20, "microbatches": 2, "microbatch_size": 2, "lr": 0.01},
                     "data": {"format": "generated", "generated_tokens": 4096}})
print(job, state_name(client.wait(job, timeout=300).state))
for row in client.history(job):
    print(f"step {row.step:3d}  loss {row.loss:.4f}  lr {row.learning_rate:g}  grad norm {row.grad_norm:.3f}")
for line in client.logs(job):
    print(f"[{line.worker} rank {line.rank}] {line.text}")
print("tensorboard scalars:", client.export_tensorboard(job, sys.argv[4] if len(sys.argv) > 4 else f"runs/{job}"))
