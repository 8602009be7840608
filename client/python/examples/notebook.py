# %% [markdown]
# # pipeline-client, cell by cell
# Run the cells in order (VS Code, Jupyter with jupytext, or `python notebook.py`). Set
# PP_ADDRESS, PP_CA and PP_TOKEN_FILE to the values of `ppctl up`'s "reach it:" line first.
# Needs the extras: pip install './client/python[tensorboard,pandas]'

# %% Connect and look at the cluster
import tempfile

import pipeline_client as pc

client = pc.Client.from_env()
for worker in client.workers():
    print(worker.name, worker.device, pc.coordinator_pb2.WorkerState.Name(worker.state))

# %% A spec, and what the planner makes of it before anything runs
spec = {
    "name": "notebook",
    "model": {"vocab_size": 256, "seq_len": 32, "d_model": 32, "n_heads": 2, "n_layers": 2},
    "parallel": {"pipeline": 1, "schedule": "1f1b"},
    "train": {"steps": 200, "microbatches": 4, "microbatch_size": 2, "lr": 0.01, "warmup_steps": 20},
    "data": {"format": "generated", "generated_tokens": 8192},
    "eval": {"every_steps": 50, "batches": 2, "holdout_fraction": 0.1},
}
print(client.plan(spec).ascii)

# %% A refused spec says which field is wrong
try:
    client.submit(dict(spec, model=dict(spec["model"], n_heads=3)))
except pc.InvalidSpec as e:
    print("refused:", e.field, "-", e.details)

# %% Submit, and watch it live
job = client.submit(spec)
for event in client.watch(job, timeout=300):
    kind = pc.coordinator_pb2.JobEventKind.Name(event.kind)
    if kind != "EVENT_STEP" or event.step % 50 == 0:
        print(kind, event.step, f"loss {event.loss:.4f}", event.message)
print(pc.state_name(client.wait(job, timeout=60).state))

# %% Its history as a DataFrame
frame = client.history(job).to_pandas()
print(frame[["loss", "learning_rate", "grad_norm", "eval_loss"]].iloc[::40])
print(frame["eval_loss"].dropna())

# %% Its workers' logs
for line in client.logs(job):
    print(f"{line.worker} r{line.rank} a{line.attempt} #{line.seq}: {line.text}")

# %% TensorBoard: tensorboard --logdir=<that folder>
print(client.export_tensorboard(job, tempfile.mkdtemp(prefix=f"tb-{job}-")))
