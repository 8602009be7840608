"""pipeline-client against a real secure cluster (`ppctl up --view_token`: TLS and tokens).

Runs when $PP_ADDRESS, $PP_CA, $PP_TOKEN_FILE (an admin or submit token) and $PP_VIEW_TOKEN_FILE
(a view token) are set, as tests/deploy/check_python_package.py sets them; skipped otherwise.
The cluster needs one free CPU worker; jobs run one after another on it.
"""

import os
import tempfile
import time
import unittest

import pipeline_client as pc
from pipeline_client import coordinator_pb2

ADDRESS = os.environ.get("PP_ADDRESS", "")
CA = os.environ.get("PP_CA", "")
TOKEN_FILE = os.environ.get("PP_TOKEN_FILE", "")
VIEW_TOKEN_FILE = os.environ.get("PP_VIEW_TOKEN_FILE", "")
JOB_TIMEOUT_S = 240


def tiny_spec(name, steps, **train):
    """A tiny model on generated tokens on one worker: about 4 ms a step on a busy core."""
    return {
        "name": name,
        "model": {"vocab_size": 256, "seq_len": 32, "d_model": 32, "n_heads": 2, "n_layers": 2},
        "parallel": {"pipeline": 1, "schedule": "1f1b"},
        "train": dict({"steps": steps, "microbatches": 2, "microbatch_size": 2, "lr": 0.01,
                       "seed": 1}, **train),
        "data": {"format": "generated", "generated_tokens": 4096, "generated_seed": 3},
    }


@unittest.skipUnless(ADDRESS and CA and TOKEN_FILE and VIEW_TOKEN_FILE,
                     "no cluster: set PP_ADDRESS, PP_CA, PP_TOKEN_FILE and PP_VIEW_TOKEN_FILE")
class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = pc.Client(ADDRESS, ca=CA, token_file=TOKEN_FILE, timeout=20)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def finished(self, spec):
        """Submits `spec`, waits for it, checks it SUCCEEDED; returns (id, Job)."""
        job_id = self.client.submit(spec)
        job = self.client.wait(job_id, timeout=JOB_TIMEOUT_S)
        self.assertEqual(pc.state_name(job.state), "SUCCEEDED", job.reason)
        return job_id, job

    def test_a_call_without_a_token_is_unauthenticated(self):
        with pc.Client(ADDRESS, ca=CA, timeout=10) as anonymous:
            with self.assertRaises(pc.Unauthenticated):
                list(anonymous.list())
        with pc.Client(ADDRESS, ca=CA, token="0" * 64, timeout=10) as stranger:
            with self.assertRaises(pc.Unauthenticated) as caught:
                stranger.get("holder-1")
        self.assertNotIn("0" * 64, str(caught.exception))

    def test_a_bad_spec_raises_invalid_spec_naming_the_field(self):
        spec = tiny_spec("bad", 5)
        spec["model"]["n_heads"] = 3  # does not divide d_model 32
        with self.assertRaises(pc.InvalidSpec) as caught:
            self.client.submit(spec)
        self.assertEqual(caught.exception.field, "model.n_heads")
        self.assertIn("model.n_heads", str(caught.exception))
        spec = tiny_spec("bad", 5, min_lr=1.0)  # above train.lr
        with self.assertRaises(pc.InvalidSpec) as caught:
            self.client.plan(spec)
        self.assertEqual(caught.exception.field, "train.min_lr")

    def test_a_view_token_reads_but_cannot_submit_or_cancel(self):
        with pc.Client(ADDRESS, ca=CA, token_file=VIEW_TOKEN_FILE, timeout=10) as viewer:
            jobs = list(viewer.list())
            self.assertTrue(jobs)
            self.assertEqual(viewer.get(jobs[0].id).id, jobs[0].id)
            with self.assertRaises(pc.PermissionDenied) as caught:
                viewer.submit(tiny_spec("viewer", 5))
            self.assertIn("SubmitJob", str(caught.exception))
            with self.assertRaises(pc.PermissionDenied):
                viewer.cancel(jobs[0].id)

    def test_submit_and_watch_a_job_to_succeeded_under_the_tokens_user(self):
        job_id = self.client.submit(tiny_spec("watched", 5))
        kinds = []
        for event in self.client.watch(job_id, timeout=JOB_TIMEOUT_S):
            kinds.append(coordinator_pb2.JobEventKind.Name(event.kind))
            if kinds[-1] in ("EVENT_FINISHED", "EVENT_FAILED", "EVENT_CANCELLED"):
                break
        self.assertEqual(kinds[-1], "EVENT_FINISHED", kinds)
        self.assertIn("EVENT_STEP", kinds)
        job = self.client.get(job_id)
        self.assertEqual(pc.state_name(job.state), "SUCCEEDED")
        self.assertEqual(job.step, 5)
        self.assertEqual(job.owner, "you")  # ppctl up's admin token's user

    def test_list_iterates_every_page(self):
        for i in range(2):
            self.client.submit(tiny_spec(f"listed{i}", 1))
        one_by_one = [job.id for job in self.client.list(page_size=1)]
        at_once = [job.id for job in self.client.list(page_size=1000)]
        self.assertGreaterEqual(len(at_once), 3)
        self.assertEqual(one_by_one, at_once)
        self.assertEqual(len(set(at_once)), len(at_once))

    def test_history_of_a_10000_step_job_pages_and_exports_to_tensorboard(self):
        start = time.monotonic()
        job_id, job = self.finished(tiny_spec("long", 10000))
        seconds = time.monotonic() - start
        paged = self.client.history(job_id, page_size=333)
        whole = self.client.history(job_id, page_size=10000)
        steps = [row.step for row in paged]
        self.assertEqual(paged, whole)
        self.assertEqual(steps[0], 1)
        self.assertEqual(steps[-1], 10000)
        self.assertTrue(all(a < b for a, b in zip(steps, steps[1:])), "steps ascend, no repeats")
        # ppcoord keeps the newest 1024 steps whole and thins older ones (docs/jobs.md).
        self.assertEqual(steps[-1024:], list(range(10000 - 1023, 10001)))
        self.assertLessEqual(len(steps), 4096)
        self.assertEqual([r.step for r in self.client.history(job_id, from_step=9990, page_size=4)],
                         list(range(9990, 10001)))
        print(f"\n  10000-step job {job_id}: {seconds:.1f} s, {len(steps)} records kept", flush=True)

        try:
            from tensorboard.backend.event_processing import event_accumulator
        except ImportError:
            self.skipTest("tensorboard is not installed")
        with tempfile.TemporaryDirectory() as logdir:
            path = self.client.export_tensorboard(job_id, logdir)
            self.assertTrue(os.path.isfile(path))
            acc = event_accumulator.EventAccumulator(logdir, size_guidance={"scalars": 0})
            acc.Reload()
            for tag in ("loss", "learning_rate", "grad_norm", "tokens_per_second", "bubble_ratio"):
                events = acc.Scalars(tag)
                self.assertEqual([e.step for e in events], steps, tag)
                for event, row in zip(events, paged):
                    # TensorBoard keeps simple values as 32-bit floats.
                    self.assertAlmostEqual(event.value, getattr(row, tag),
                                           delta=1e-6 * max(1.0, abs(getattr(row, tag))))
            self.assertNotIn("eval_loss", acc.Tags()["scalars"])

    def test_logs_of_an_ended_job(self):
        job_id, _ = self.finished(tiny_spec("logged", 3))
        try:
            lines = self.client.logs(job_id)
            kept = list(lines)
        except pc.Unimplemented:
            self.skipTest("this ppcoord has no GetJobLogs yet")
        followed = list(self.client.logs(job_id, follow=True, timeout=30))
        self.assertEqual([(l.worker, l.seq) for l in followed], [(l.worker, l.seq) for l in kept])
        self.assertTrue(kept, "a finished job's worker wrote lines")
        for line in kept:
            self.assertTrue(line.worker)
            self.assertNotIn("\n", line.text)
        self.assertEqual({line.rank for line in self.client.logs(job_id, rank=0)}, {0})

    def test_plan(self):
        plan = self.client.plan(tiny_spec("planned", 5))
        self.assertEqual(plan.schedule.pipeline, 1)
        self.assertTrue(plan.ascii)


if __name__ == "__main__":
    unittest.main()
