"""scripts/peer_tests.py: SGLang's DFLASH tests pointed at local models and DDTREE through its test utilities,
each test's status recorded, and a control run compared with a DDTREE run (no SGLang needed)."""

import importlib.util
import sys
import unittest
from pathlib import Path
from types import SimpleNamespace

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "peer_tests.py"
spec = importlib.util.spec_from_file_location("peer_tests", SCRIPT)
peer = sys.modules.setdefault("peer_tests", importlib.util.module_from_spec(spec))
spec.loader.exec_module(peer)


def test_the_algorithm_and_backend_values_are_replaced_and_nothing_else():
    args = ["--attention-backend", "flashinfer", "--speculative-algorithm", "DFLASH", "--page-size", 256]
    assert peer.adapt_args(args, "DDTREE") == [
        "--attention-backend", "flashinfer", "--speculative-algorithm", "DDTREE", "--page-size", "256"
    ]  # fmt: skip
    swapped = peer.adapt_args(args, "DFLASH", "triton")
    assert swapped[:4] == ["--attention-backend", "triton", "--speculative-algorithm", "DFLASH"]
    assert peer.adapt_args(["--speculative-algorithm"], "DDTREE") == ["--speculative-algorithm"]


def test_sglang_serve_becomes_the_algorithm_s_module():
    command = ["sglang", "serve", "--model-path", "m", "--port", "21000"]
    assert peer.adapt_command(command, "DDTREE") == [
        sys.executable, "-m", "ddtree_core.sglang.launch_server", "--model-path", "m", "--port", "21000"
    ]  # fmt: skip
    assert peer.adapt_command(command, "DFLASH")[1:3] == ["-m", "sglang.launch_server"]
    assert peer.adapt_command(["python3", "-m", "sglang.launch_pd_server"], "DDTREE")[0] == "python3"


def test_patch_points_the_test_utilities_at_the_local_models_and_ddtree():
    seen = {}

    def popen_launch_server(model, base_url, timeout, api_key=None, other_args=None, **kwargs):
        seen["launch"] = (model, other_args)
        return utils._launch_server_process(["sglang", "serve", "--model-path", model, *other_args], {}, None, model)

    def launch_server_process(command, env, return_stdout_stderr, model):
        seen["command"] = command

    utils = SimpleNamespace(
        DEFAULT_TARGET_MODEL_DFLASH="meta-llama/Llama-3.1-8B-Instruct",
        DEFAULT_DRAFT_MODEL_DFLASH="z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat",
        popen_launch_server=popen_launch_server,
        _launch_server_process=launch_server_process,
    )
    peer.patch(utils, "/models/target", "/models/draft", "DDTREE", None)
    assert (utils.DEFAULT_TARGET_MODEL_DFLASH, utils.DEFAULT_DRAFT_MODEL_DFLASH) == ("/models/target", "/models/draft")
    utils.popen_launch_server("/models/target", "http://x:1", 600, other_args=["--speculative-algorithm", "DFLASH"])
    assert seen["launch"] == ("/models/target", ["--speculative-algorithm", "DDTREE"])
    assert seen["command"][1:] == ["-m", "ddtree_core.sglang.launch_server", "--model-path", "/models/target",
                                   "--speculative-algorithm", "DDTREE"]  # fmt: skip


def test_the_record_keeps_each_test_s_status_and_last_message_line():
    class Sample(unittest.TestCase):  # in here, so that pytest does not collect it
        def test_ok(self):
            pass

        def test_bad(self):
            self.assertGreater(0.02, 0.75, "gsm8k score")

        def test_broken(self):
            raise RuntimeError("server went away")

        @unittest.skip("needs 2 GPUs")
        def test_skipped(self):
            pass

    class NoServer(unittest.TestCase):
        @classmethod
        def setUpClass(cls):
            raise Exception("Server process exited with code 1.")

        def test_never(self):
            pass

    record = peer.Record()
    unittest.TestLoader().loadTestsFromTestCase(Sample).run(record)
    unittest.TestSuite([unittest.TestLoader().loadTestsFromTestCase(NoServer)]).run(record)
    rows = {name.split(" ")[0].rsplit(".", 1)[-1]: row for name, row in record.rows.items()}
    assert rows["test_ok"]["status"] == "pass" and rows["test_skipped"]["status"] == "skip"
    assert rows["test_bad"]["status"] == "fail" and "gsm8k score" in rows["test_bad"]["message"]
    assert rows["test_broken"]["status"] == "error"
    assert rows["test_broken"]["message"] == "RuntimeError: server went away"
    assert rows["setUpClass"]["status"] == "error" and "exited with code 1" in rows["setUpClass"]["message"]


def test_compare_tells_shared_failures_from_ddtree_s_own():
    control = {"tests": {name: {"status": status} for name, status in zip("abcd", ("pass", "fail", "pass", "fail"))}}
    ddtree = {"tests": {"a": {"status": "pass"}, "b": {"status": "fail", "message": "0.02 < 0.75"},
                        "c": {"status": "fail", "message": "AssertionError: x"}, "d": {"status": "pass"}}}  # fmt: skip
    lines = peer.compare(control, ddtree).splitlines()
    assert lines[2:] == [
        "| a | pass | pass | both pass |  |",
        "| b | fail | fail | shared (the target) | 0.02 < 0.75 |",
        "| c | pass | fail | DDTREE only fails | AssertionError: x |",
        "| d | fail | pass | DDTREE only passes |  |",
    ]
