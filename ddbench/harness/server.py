"""Inference servers as context managers: start, health-check, warm up, stop cleanly.

A `Server` starts its process in a new session (so stopping it kills the whole process group, SGLang's
scheduler and detokenizer children included), sends its output to a log file in the run folder, polls
`GET /health` until it answers, fails fast when the process exits during startup (quoting the log's
last line), and sends one short warm-up request before any measured one.

Two engines speak SGLang's `/generate` protocol:
- `sglang`: `python -m sglang.launch_server`, with `--speculative-algorithm DFLASH` for linear DFlash
  and our plugin's launcher `python -m ddtree_core.sglang.launch_server --speculative-algorithm DDTREE`
  for DDTree (launch-time DDTree settings, a `ddtree_core.settings.TreeSettings`, through SGLANG_DDTREE_*
  variables, per-request ones through `sampling_params.custom_params`);
- `reference`: `python -m ddtree_core.reference.server`, the HF-transformers engine (CPU or one GPU).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from ddbench import env
from ddbench.config import DDBenchError
from ddtree_core.settings import BUDGET_AUTO, ENV_BUDGET, TreeSettings

WARMUP_TEXT = "Warmup"


class ServerError(DDBenchError):
    """A server that would not start, or that died."""


@dataclass(frozen=True)
class ServerSpec:
    """What to start: engine, method, models, devices; `command` and `environment` build the process."""

    engine: str  # sglang | reference
    method: str  # ar | dflash | ddtree
    model: str
    draft: str
    gpus: tuple[int, ...] = ()  # CUDA devices of this server; empty: CPU
    tp: int = 1
    launch: TreeSettings | None = None  # ddtree only: its DDTree settings, which requests' custom_params lower
    cpu_threads: int | None = None  # torch threads of a CPU reference server
    extra_args: tuple[str, ...] = ()

    def command(self, port: int) -> list[str]:
        if self.engine == "reference":
            return self._reference_command(port)
        return self._sglang_command(port)

    def _reference_command(self, port: int) -> list[str]:
        command = [sys.executable, "-m", "ddtree_core.reference.server", "--model", self.model]
        command += ["--draft", self.draft, "--method", self.method, "--port", str(port)]
        command += ["--device", "cuda" if self.gpus else "cpu"]
        if self.launch is not None:
            command += ["--budget", str(self.launch.budget)]
            command += ["--draft-temperature", str(self.launch.draft_temperature)]
            if self.launch.max_depth is not None:
                command += ["--max-depth", str(self.launch.max_depth)]
            if self.launch.hold_chain:
                command += ["--hold-chain"]
        return command + list(self.extra_args)

    def _sglang_command(self, port: int) -> list[str]:
        module = "ddtree_core.sglang.launch_server" if self.method == "ddtree" else "sglang.launch_server"
        command = [sys.executable, "-m", module, "--model-path", self.model, "--port", str(port)]
        command += ["--host", "127.0.0.1", "--tp-size", str(self.tp)]
        if self.method != "ar":
            algorithm = "DDTREE" if self.method == "ddtree" else "DFLASH"
            command += ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", self.draft]
        return command + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(gpu) for gpu in self.gpus)
        if self.cpu_threads is not None:
            env["OMP_NUM_THREADS"] = str(self.cpu_threads)
            env["MKL_NUM_THREADS"] = str(self.cpu_threads)
        if self.engine == "sglang" and self.launch is not None:
            env.update(dataclasses.replace(self.launch, auto=False).to_environment())
            if self.launch.auto:  # the plugin's own auto budgets (ddtree_core.sglang.config)
                env[ENV_BUDGET] = BUDGET_AUTO
        return env

    @property
    def label(self) -> str:
        label = f"{self.engine}-{self.method}"
        if self.launch is not None:
            depth = "auto" if self.launch.max_depth is None else self.launch.max_depth
            budget = BUDGET_AUTO if self.launch.auto else self.launch.budget
            label += f"-b{budget}-d{depth}-dt{self.launch.draft_temperature:g}"
            label += "-chain" if self.launch.hold_chain else ""
        return label + (f"-gpu{'_'.join(map(str, self.gpus))}" if self.gpus else "")


# SGLang derives more ports from --port (its gRPC port is --port + 10000 and must stay <= 65535; ZMQ and
# NCCL ports follow it), so servers get ports from a range that leaves room above. The range (and port +
# 10000) stays below Linux's ephemeral ports (32768 and up by default): a port found free could otherwise
# become the local port of an outgoing connection (another server's health polls) before its server binds it.
PORT_RANGE = (10000, 22000)


def free_port(low: int = PORT_RANGE[0], high: int = PORT_RANGE[1]) -> int:
    """A TCP port in [low, high) that nobody listens on right now."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(low, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise ServerError(f"no free TCP port in [{low}, {high})")


class Server:
    """A running server; `with Server(spec, log_path) as server:` starts it and always stops it."""

    def __init__(self, spec: ServerSpec, log_path: Path, *, startup_timeout_s: float = 900.0, port: int = 0):
        self.spec = spec
        self.log_path = log_path
        self.port = port or free_port()
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen | None = None
        self.started_at: float | None = None  # epoch seconds at launch

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid_path(self) -> Path:
        return self.log_path.with_suffix(".pid")

    def __enter__(self) -> Server:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        command = self.spec.command(self.port)
        self.started_at = time.time()
        with open(self.log_path, "a") as log:
            log.write(gpu_snapshot(self.spec.gpus))
            settings = env.ddtree_settings(self.spec.environment())
            log.write("".join(f"{name}={value}\n" for name, value in settings.items()))
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.spec.environment(),
                start_new_session=True,
            )
        self.pid_path.write_text(f"{self.process.pid}\n")
        self.wait_healthy()
        self.warm_up()

    def wait_healthy(self) -> None:
        """Poll /health until it answers 200; raise as soon as the process has exited."""
        deadline = time.monotonic() + self.startup_timeout_s
        with httpx.Client(timeout=5.0) as client:
            while time.monotonic() < deadline:
                self.check_alive("during startup")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(self.url + "/health").status_code == 200:
                        return
                time.sleep(0.25)
        raise ServerError(f"{self.spec.label} not healthy after {self.startup_timeout_s:g} s (log: {self.log_path})")

    def warm_up(self) -> None:
        payload = {"text": WARMUP_TEXT, "sampling_params": {"temperature": 0.0, "max_new_tokens": 8}}
        try:
            httpx.post(self.url + "/generate", json=payload, timeout=self.startup_timeout_s).raise_for_status()
        except httpx.HTTPError as error:
            self.check_alive("during warm-up")
            raise ServerError(f"{self.spec.label} warm-up failed: {error} (log: {self.log_path})") from error

    def info(self) -> dict:
        """GET /get_server_info (SGLang and the reference engine); {} if the server has none."""
        try:
            response = httpx.get(self.url + "/get_server_info", timeout=30.0)
            response.raise_for_status()
            data = response.json()
        except (httpx.HTTPError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def block_size(self) -> int | None:
        """The drafter's block size as the server reports it (SGLang DFLASH: speculative_num_draft_tokens)."""
        info = self.info()
        value = info.get("ddtree_block_size")
        if value is None and self.spec.method == "dflash":
            value = info.get("speculative_num_draft_tokens")
        return value if isinstance(value, int) else None

    def exited(self, timeout_s: float) -> bool:
        """Whether the process exits within `timeout_s` (after a refused connection, say)."""
        if self.process is None:
            return True
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self, when: str = "") -> None:
        """Raise ServerError quoting the log's last line if the process has exited."""
        if self.process is None:
            raise ServerError(f"{self.spec.label} was stopped {when}")
        if self.alive():
            return
        code = self.process.returncode
        raise ServerError(
            f"{self.spec.label} exited with code {code} {when}: {last_log_line(self.log_path)} (log: {self.log_path})"
        )

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM to the process group, SIGKILL after `grace_s`; idempotent."""
        process, self.process = self.process, None
        self.pid_path.unlink(missing_ok=True)
        if process is None:
            return
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait()
        else:
            _signal_group(process.pid, signal.SIGKILL)  # children a dead leader left behind


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def gpu_snapshot(gpus: tuple[int, ...]) -> str:
    """What nvidia-smi says of `gpus` (memory in use, utilisation, processes) before a server starts there:
    the record that nothing else ran on them. Empty without GPUs or nvidia-smi."""
    if not gpus:
        return ""
    ids = ",".join(str(gpu) for gpu in gpus)
    lines = []
    for query in ("--query-gpu=index,memory.used,utilization.gpu", "--query-compute-apps=gpu_uuid,pid,used_memory"):
        try:
            done = subprocess.run(
                ["nvidia-smi", "-i", ids, query, "--format=csv,noheader"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        lines += [
            f"nvidia-smi {query.split('=')[0].removeprefix('--query-')}: {line}"
            for line in done.stdout.splitlines() or ["(none)"]
        ]
    return "".join(f"{line}\n" for line in lines)


def last_log_line(path: Path, max_chars: int = 300) -> str:
    """The last non-empty line of a log (what a crashed server said last)."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:max_chars] if lines else "(empty log)"
