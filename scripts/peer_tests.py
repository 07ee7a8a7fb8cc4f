"""SGLang's own DFLASH server tests (release 0.5.15) run against a DDTREE server, with the least adaptation: the
hub model ids become local folders, the launcher becomes a module (the device has no `sglang` console script),
and for DDTREE the `--speculative-algorithm` value becomes DDTREE. Nothing else in a test changes: no threshold,
no prompt. A control run of the same tests with DFLASH on the same local models tells which failures come from
the small testbed target (both fail) and which from DDTREE (only it fails).

    python scripts/peer_tests.py gather --git-dir SGLANG.git --sglang-test SITE/sglang/test --out .device/peers
    python scripts/peer_tests.py run --tests .device/peers --algorithm DFLASH --target T --draft D --out dflash.json
    python scripts/peer_tests.py run --tests .device/peers --algorithm DDTREE --target T --draft D --out ddtree.json
    python scripts/peer_tests.py compare dflash.json ddtree.json          # a markdown table, one row per test

`gather` copies the test files (FILES, at COMMIT of sgl-project/sglang: the files of the 0.5.15 wheel match that
`main` commit, and the release branch changed no test) and the wheel's `sglang/test` package (SGLang's server
bundle leaves it out) into one folder that travels to the GPU machine beside the bundle, with the `tabulate`
wheel one test needs. `run` adds that package to the installed sglang where it lacks one, patches
`sglang.test.test_utils` as said above, imports each test file and runs the selected classes (`--select
test_dflash.py:TestDFlashServerBase`; default: SELECTED), and writes every test's status (pass, fail, error,
skip) and the last line of its message as JSON.
`--attention-backend` also replaces the tests' attention backend (an adaptation the record names).

Example: `compare` rows read "pass | pass | both pass", "fail | fail | shared (the target)", "pass | fail |
DDTREE only": the last kind is a finding.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import unittest
from pathlib import Path

COMMIT = "99db3b0fa51c6f622ce0c0a0015c46e5b00ca104"  # sgl-project/sglang main: the 0.5.15 wheel's sources
FILES = (
    "test/registered/spec/dflash/test_dflash.py",
    "test/registered/core/test_basic_sanity_dflash.py",
    "test/registered/cuda_graph/piecewise/test_pcg_with_speculative_decoding_dflash.py",
)
SELECTED = (  # one server each; the overlap scheduler (SGLang's default) first
    "test_dflash.py:TestDFlashServerSpecV2",
    "test_dflash.py:TestDFlashServerBase",
    "test_dflash.py:TestDFlashServerPage256",
    "test_basic_sanity_dflash.py",
)
LAUNCHERS = {"DDTREE": "ddtree_core.sglang.launch_server", "DFLASH": "sglang.launch_server"}


def adapt_args(args: list, algorithm: str, attention_backend: str | None = None) -> list[str]:
    """A test's server arguments for `algorithm`: the value after --speculative-algorithm (and, where given, after
    --attention-backend) replaced.

    >>> adapt_args(["--speculative-algorithm", "DFLASH", "--page-size", 1], "DDTREE")
    ['--speculative-algorithm', 'DDTREE', '--page-size', '1']
    """
    out = [str(arg) for arg in args]
    for flag, value in (("--speculative-algorithm", algorithm), ("--attention-backend", attention_backend)):
        for i, arg in enumerate(out[:-1]):
            if arg == flag and value is not None:
                out[i + 1] = value
    return out


def adapt_command(command: list[str], algorithm: str) -> list[str]:
    """`sglang serve ARGS` (the tests' launcher, a console script) as `python -m MODULE ARGS`."""
    if command[:2] == ["sglang", "serve"]:
        return [sys.executable, "-m", LAUNCHERS[algorithm], *command[2:]]
    return command


def patch(test_utils, target: str, draft: str, algorithm: str, attention_backend: str | None) -> None:
    """Point `sglang.test.test_utils` (imported, not yet used by any test module) at the local models, the
    algorithm and its launcher."""
    test_utils.DEFAULT_TARGET_MODEL_DFLASH = target
    test_utils.DEFAULT_DRAFT_MODEL_DFLASH = draft
    launch, process = test_utils.popen_launch_server, test_utils._launch_server_process

    def popen_launch_server(model, base_url, timeout, api_key=None, other_args=None, **kwargs):
        args = adapt_args(list(other_args or []), algorithm, attention_backend)
        return launch(model, base_url, timeout, api_key=api_key, other_args=args, **kwargs)

    def launch_server_process(command, env, return_stdout_stderr, model):
        return process(adapt_command(list(command), algorithm), env, return_stdout_stderr, model)

    test_utils.popen_launch_server = popen_launch_server
    test_utils._launch_server_process = launch_server_process


class Record(unittest.TestResult):
    """Each test's status, the last line of its failure (the assertion), and its seconds."""

    def __init__(self):
        super().__init__()
        self.rows: dict[str, dict] = {}
        self._start = 0.0

    def startTest(self, test):  # noqa: N802 (unittest's names)
        super().startTest(test)
        self._start = time.perf_counter()
        print(f"--- {test.id()}", flush=True)

    def _row(self, test, status: str, message: str = "") -> None:
        lines = [line for line in message.strip().splitlines() if line.strip()]
        self.rows[test.id()] = {
            "status": status,
            "message": lines[-1][:300] if lines else "",
            "seconds": round(time.perf_counter() - self._start, 1),
        }
        print(f"    {status} {self.rows[test.id()]['message']}", flush=True)

    def addSuccess(self, test):  # noqa: N802
        self._row(test, "pass")

    def addFailure(self, test, err):  # noqa: N802
        super().addFailure(test, err)
        self._row(test, "fail", self._exc_info_to_string(err, test))

    def addError(self, test, err):  # noqa: N802 (a class whose setUpClass failed comes as its _ErrorHolder)
        super().addError(test, err)
        self._row(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):  # noqa: N802
        self._row(test, "skip", reason)


def run(args: argparse.Namespace) -> int:
    tests = Path(args.tests).resolve()
    import sglang

    if importlib.util.find_spec("sglang.test") is None:  # the server bundle leaves the package out: gather's copy
        sglang.__path__.append(str(tests / "sglang"))
    if importlib.util.find_spec("tabulate") is None:  # a pure-Python wheel imports from its zip
        sys.path.extend(str(wheel) for wheel in sorted((tests / "wheels").glob("tabulate-*.whl")))
    from sglang.test import test_utils

    patch(test_utils, args.target, args.draft, args.algorithm, args.attention_backend)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if args.gsm8k:  # the GSM8K kit reads /tmp/test.jsonl where it exists instead of downloading it
        shutil.copyfile(args.gsm8k, "/tmp/test.jsonl")
    record = Record()
    for selection in args.select or SELECTED:
        filename, _, name = selection.partition(":")
        spec = importlib.util.spec_from_file_location(f"peer_{Path(filename).stem}", tests / "dflash" / filename)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        loader = unittest.TestLoader()
        suite = loader.loadTestsFromName(name, module) if name else loader.loadTestsFromModule(module)
        suite.run(record)
    statuses = [row["status"] for row in record.rows.values()]
    counts = {status: statuses.count(status) for status in ("pass", "fail", "error", "skip")}
    result = {
        "algorithm": args.algorithm,
        "commit": COMMIT,
        "target": args.target,
        "draft": args.draft,
        "attention_backend": args.attention_backend,
        "ddtree_env": {k: v for k, v in os.environ.items() if k.startswith("SGLANG_DDTREE_")},
        "selected": list(args.select or SELECTED),
        "counts": counts,
        "tests": record.rows,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(counts))
    return 0


VERDICTS = {
    ("pass", "pass"): "both pass",
    ("pass", "fail"): "DDTREE only fails",
    ("pass", "error"): "DDTREE only fails",
    ("fail", "pass"): "DDTREE only passes",
    ("error", "pass"): "DDTREE only passes",
}


def compare(control: dict, ddtree: dict) -> str:
    """A markdown table: each test's status in the control (DFLASH) and DDTREE runs, and the verdict."""
    rows = ["| test | DFLASH | DDTREE | verdict | DDTREE's message |", "|---|---|---|---|---|"]
    for test in sorted(set(control["tests"]) | set(ddtree["tests"])):
        a = control["tests"].get(test, {}).get("status", "-")
        b = ddtree["tests"].get(test, {}).get("status", "-")
        verdict = VERDICTS.get((a, b), "shared (the target)" if a == b else f"{a} / {b}")
        message = ddtree["tests"].get(test, {}).get("message", "") if b != "pass" else ""
        rows.append(f"| {test.removeprefix('peer_')} | {a} | {b} | {verdict} | {message.replace('|', '/')} |")
    return "\n".join(rows) + "\n"


def gather(args: argparse.Namespace) -> int:
    out = Path(args.out)
    (out / "dflash").mkdir(parents=True, exist_ok=True)
    for path in FILES:
        text = subprocess.run(
            ["git", f"--git-dir={args.git_dir}", "show", f"{COMMIT}:{path}"], check=True, capture_output=True, text=True
        ).stdout
        (out / "dflash" / Path(path).name).write_text(text)
    shutil.rmtree(out / "sglang", ignore_errors=True)
    shutil.copytree(args.sglang_test, out / "sglang" / "test", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "tabulate", "-d", str(out / "wheels")]
    subprocess.run(pip, check=True)
    wheels = ", ".join(p.name for p in (out / "wheels").iterdir())
    print(f"{out}: {len(FILES)} test files at {COMMIT[:9]}, sglang/test, {wheels}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("gather", help="the test files and sglang/test into one folder")
    g.add_argument("--git-dir", required=True, help="a git directory of sgl-project/sglang holding COMMIT")
    g.add_argument("--sglang-test", required=True, help="the sglang/test folder of an installed SGLang 0.5.15")
    g.add_argument("--out", required=True)
    r = sub.add_parser("run", help="run the selected tests against one algorithm")
    r.add_argument("--tests", required=True, help="the folder gather wrote")
    r.add_argument("--algorithm", required=True, choices=sorted(LAUNCHERS))
    r.add_argument("--target", required=True, help="the target model folder (for the tests' Llama-3.1-8B)")
    r.add_argument("--draft", required=True, help="its DFlash drafter folder")
    r.add_argument("--select", action="append", help="FILE[:CLASS], repeatable (default: SELECTED)")
    r.add_argument("--attention-backend", help="replace the tests' attention backend (an adaptation)")
    r.add_argument("--gsm8k", help="a local GSM8K test.jsonl (the tests download it otherwise)")
    r.add_argument("--out", required=True)
    c = sub.add_parser("compare", help="a markdown table of a DFLASH and a DDTREE run")
    c.add_argument("control")
    c.add_argument("ddtree")
    args = parser.parse_args(argv)
    if args.command == "gather":
        return gather(args)
    if args.command == "run":
        return run(args)
    print(compare(json.loads(Path(args.control).read_text()), json.loads(Path(args.ddtree).read_text())), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
