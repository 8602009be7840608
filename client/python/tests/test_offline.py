"""pipeline-client against an in-process fake ppcoord: paging, logs, waiting, errors, specs.

Run: python -m unittest discover -s client/python/tests (with pipeline-client installed).
"""

import json
import os
import tempfile
import time
import unittest

import grpc

import pipeline_client as pc
from pipeline_client import coordinator_pb2, job_pb2

from fake_coordinator import Server, records

SPEC = {
    "name": "tiny",
    "model": {"vocab_size": 256, "seq_len": 32, "d_model": 32, "n_heads": 2, "n_layers": 2},
    "parallel": {"pipeline": 1, "schedule": "1f1b"},
    "train": {"steps": 5, "microbatches": 2, "microbatch_size": 2, "lr": 0.01},
    "data": {"format": "generated", "generated_tokens": 4096},
}


class FakeServerTest(unittest.TestCase):
    def setUp(self):
        self.server = Server().__enter__()
        self.fake = self.server.fake
        self.client = pc.Client(self.server.address, timeout=10)

    def tearDown(self):
        self.client.close()
        self.server.__exit__(None, None, None)


class HistoryPagingTest(FakeServerTest):
    def test_a_10000_step_history_pages_in_order(self):
        # As ppcoord keeps a 10,000-step job: the newest 1024 steps whole, older ones thinned.
        self.fake.steps["big-1"] = records(10000, thin_before=10000 - 1024, every=3, eval_every=500)
        history = self.client.history("big-1", page_size=250)
        want = [r.step for r in self.fake.steps["big-1"]]
        self.assertEqual([row.step for row in history], want)
        pages = self.fake.count("ListJobSteps")
        self.assertEqual(pages, -(-len(want) // 250))
        self.assertEqual(history[-1].step, 10000)
        self.assertEqual(history.job_id, "big-1")
        self.assertEqual(self.client.history("big-1", page_size=10000), history)  # one page
        self.assertEqual([r.step for r in self.client.history("big-1")], want)  # server default

    def test_rows_carry_every_field(self):
        self.fake.steps["j-1"] = records(30, eval_every=10, skip={7})
        history = self.client.history("j-1", page_size=4)
        row = history[9]
        self.assertEqual(row.step, 10)
        self.assertAlmostEqual(row.loss, 1.0)
        self.assertAlmostEqual(row.grad_norm, 1.01)
        self.assertAlmostEqual(row.eval_loss, 1.1)
        self.assertIsNone(history[8].eval_loss)
        self.assertTrue(history[6].skipped)
        self.assertEqual(history.column("step"), list(range(1, 31)))
        with self.assertRaises(KeyError):
            history.column("nope")

    def test_from_step(self):
        self.fake.steps["j-1"] = records(50)
        self.assertEqual([r.step for r in self.client.history("j-1", from_step=41, page_size=3)],
                         list(range(41, 51)))

    def test_to_pandas(self):
        try:
            import pandas  # noqa: F401
        except ImportError:
            self.skipTest("pandas is not installed")
        self.fake.steps["j-1"] = records(12, eval_every=4)
        frame = self.client.history("j-1", page_size=5).to_pandas()
        self.assertEqual(list(frame.index), list(range(1, 13)))
        self.assertAlmostEqual(frame.loc[4, "loss"], 2.5)
        self.assertAlmostEqual(frame.loc[8, "eval_loss"], 11.0 / 8)
        self.assertIn("grad_norm", frame.columns)


class ListTest(FakeServerTest):
    def test_list_follows_every_page(self):
        for i in range(23):
            self.client.submit(dict(SPEC, name=f"job{i:02d}"))
        jobs = list(self.client.list(page_size=5))
        self.assertEqual(len(jobs), 23)
        self.assertEqual(len({j.id for j in jobs}), 23)
        self.assertEqual(self.fake.count("ListJobs"), 5)


class SpecTest(FakeServerTest):
    def test_submit_takes_a_dict_a_json_file_a_text_file_and_a_jobspec(self):
        with tempfile.TemporaryDirectory() as tmp:
            json_path = os.path.join(tmp, "spec.json")
            with open(json_path, "w") as f:
                json.dump(SPEC, f)
            text_path = os.path.join(tmp, "spec.txt")
            with open(text_path, "w") as f:
                f.write('name: "text" model { vocab_size: 256 d_model: 32 n_heads: 2 }')
            ids = [self.client.submit(SPEC), self.client.submit(json_path),
                   self.client.submit(text_path), self.client.submit(pc.load_spec(SPEC))]
        self.assertEqual(len(set(ids)), 4)
        specs = [request.spec for method, request in self.fake.calls if method == "SubmitJob"]
        self.assertEqual(specs[0], specs[1])
        self.assertEqual(specs[0].model.d_model, 32)
        self.assertEqual(specs[2].name, "text")
        self.assertEqual(specs[3], specs[0])

    def test_an_unknown_field_is_an_invalid_spec_naming_it(self):
        with self.assertRaises(pc.InvalidSpec) as caught:
            self.client.submit({"model": {"dModl": 32}})
        self.assertEqual(caught.exception.field, "model.d_modl")
        self.assertEqual(self.fake.count("SubmitJob"), 0)

    def test_the_servers_invalid_argument_names_the_field(self):
        self.fake.submit_error = (grpc.StatusCode.INVALID_ARGUMENT,
                                  "model.n_heads: 3 does not divide model.d_model 32")
        with self.assertRaises(pc.InvalidSpec) as caught:
            self.client.submit(SPEC)
        e = caught.exception
        self.assertEqual(e.field, "model.n_heads")
        self.assertEqual(e.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("does not divide", e.details)
        self.assertEqual(e.method, "SubmitJob")
        self.assertIsInstance(e.rpc_error, grpc.RpcError)

    def test_codes_map_to_their_exceptions(self):
        cases = [
            (grpc.StatusCode.PERMISSION_DENIED, pc.PermissionDenied),
            (grpc.StatusCode.UNAUTHENTICATED, pc.Unauthenticated),
            (grpc.StatusCode.RESOURCE_EXHAUSTED, pc.ResourceExhausted),
            (grpc.StatusCode.FAILED_PRECONDITION, pc.FailedPrecondition),
            (grpc.StatusCode.ALREADY_EXISTS, pc.AlreadyExists),
            (grpc.StatusCode.INTERNAL, pc.InternalError),
        ]
        for code, cls in cases:
            self.fake.submit_error = (code, f"SubmitJob: {code.name}")
            with self.assertRaises(cls) as caught:
                self.client.submit(SPEC)
            self.assertEqual(caught.exception.code, code)
            self.assertIsInstance(caught.exception, pc.PipelineError)
        with self.assertRaises(pc.NotFound):
            self.client.get("nope-1")
        with self.assertRaises(pc.PermissionDenied):
            self.client.cancel("x-1")
        with self.assertRaises(pc.Unimplemented):
            self.client.workers()

    def test_spec_field(self):
        field = pc.errors.spec_field
        self.assertEqual(field("SubmitJob: parallel.stage_layers[2]: too many"), "parallel.stage_layers[2]")
        self.assertEqual(field("eval: needs exactly one of eval.data and eval.holdout_fraction"), "eval")
        self.assertEqual(field("job x-1: not found"), None)
        self.assertEqual(field("ResumeJob: step 5: no checkpoint"), None)


class WaitAndLogsTest(FakeServerTest):
    def _run_job(self, job_id, get_calls_until_done, lines_per_get=2):
        """A RUNNING job whose GetJob answers SUCCEEDED from call `get_calls_until_done` on; each
        GetJob call also appends log lines, as workers would write them meanwhile."""
        self.fake.jobs[job_id] = job_pb2.Job(id=job_id, state=job_pb2.RUNNING)
        self.fake.log_lines[job_id] = []
        calls = [0]

        def hook(requested):
            calls[0] += 1
            lines = self.fake.log_lines[job_id]
            for _ in range(lines_per_get):
                lines.append(coordinator_pb2.JobLogLine(worker="w0", rank=len(lines) % 2,
                                                        seq=len(lines) + 1, text=f"line {len(lines) + 1}"))
            if calls[0] >= get_calls_until_done:
                self.fake.jobs[job_id].state = job_pb2.SUCCEEDED

        self.fake.get_hook = hook

    def test_wait_returns_the_ended_job_even_when_the_watch_closes_early(self):
        self._run_job("j-1", get_calls_until_done=3)
        job = self.client.wait("j-1", timeout=20)
        self.assertEqual(pc.state_name(job.state), "SUCCEEDED")
        self.assertGreaterEqual(self.fake.count("WatchJob"), 2)

    def test_wait_stops_at_a_terminal_event(self):
        self._run_job("j-1", get_calls_until_done=3)  # the test's get, wait's, wait's after FINISHED
        self.fake.watch_events["j-1"] = [
            coordinator_pb2.JobEvent(kind=coordinator_pb2.EVENT_STEP, step=1),
            coordinator_pb2.JobEvent(kind=coordinator_pb2.EVENT_FINISHED, step=5),
        ]
        self.assertEqual(self.client.wait(self.client.get("j-1"), timeout=20).state, job_pb2.SUCCEEDED)
        self.assertEqual(self.fake.count("WatchJob"), 1)

    def test_wait_times_out(self):
        self.fake.jobs["j-1"] = job_pb2.Job(id="j-1", state=job_pb2.RUNNING, step=3)
        start = time.monotonic()
        with self.assertRaises(pc.WaitTimeout) as caught:
            self.client.wait("j-1", timeout=1.0)
        self.assertLess(time.monotonic() - start, 5)
        self.assertEqual(caught.exception.job.step, 3)
        self.assertIsInstance(caught.exception, TimeoutError)

    def test_logs_without_follow_returns_what_is_kept(self):
        self.fake.jobs["j-1"] = job_pb2.Job(id="j-1", state=job_pb2.RUNNING)
        self.fake.log_lines["j-1"] = [
            coordinator_pb2.JobLogLine(worker="w0", rank=0, seq=i, text=f"line {i}")
            for i in range(1, 2501)]
        logs = self.client.logs("j-1")
        texts = [line.text for line in logs]
        self.assertEqual(texts, [f"line {i}" for i in range(1, 2501)])
        self.assertEqual(self.fake.count("GetJobLogs"), 3)  # 1000 + 1000 + 500
        self.assertEqual(logs.unreachable, {"w9"})
        self.assertEqual(self.fake.count("GetJob"), 0)

    def test_logs_follow_until_the_job_ends_then_once_more(self):
        self._run_job("j-1", get_calls_until_done=4)
        texts = [line.text for line in self.client.logs("j-1", follow=True, poll_seconds=0.05,
                                                        timeout=20)]
        # Every line appended before the job ended is read: the last call comes after it ended.
        self.assertEqual(texts, [f"line {i}" for i in range(1, 9)])
        tokens = [r.page_token for m, r in self.fake.calls if m == "GetJobLogs"]
        self.assertEqual(tokens[0], "")
        self.assertEqual(len(tokens), 4)

    def test_logs_of_one_rank(self):
        self._run_job("j-1", get_calls_until_done=1, lines_per_get=6)
        self.client.get("j-1")
        lines = list(self.client.logs("j-1", rank=1))
        self.assertEqual([line.rank for line in lines], [1, 1, 1])


class TensorBoardTest(unittest.TestCase):
    def test_scalars_read_back_with_tensorboards_reader(self):
        try:
            from tensorboard.backend.event_processing import event_accumulator
        except ImportError:
            self.skipTest("tensorboard is not installed")
        from pipeline_client.tensorboard import write_scalars

        rows = pc.History("j-1", [pc.StepRow.from_proto(r) for r in records(40, eval_every=10)])
        with tempfile.TemporaryDirectory() as logdir:
            path = write_scalars(rows, logdir, suffix=".j-1")
            self.assertTrue(os.path.isfile(path))
            acc = event_accumulator.EventAccumulator(logdir, size_guidance={"scalars": 0})
            acc.Reload()
            tags = set(acc.Tags()["scalars"])
            self.assertEqual(tags, set(pc.tensorboard.SCALARS))
            loss = acc.Scalars("loss")
            self.assertEqual([e.step for e in loss], list(range(1, 41)))
            for event, row in zip(loss, rows):
                self.assertAlmostEqual(event.value, row.loss, places=5)
                self.assertAlmostEqual(event.wall_time, row.time_unix)
            self.assertEqual([e.step for e in acc.Scalars("eval_loss")], [10, 20, 30, 40])


if __name__ == "__main__":
    unittest.main()
