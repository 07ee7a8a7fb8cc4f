"""Loading a target, its DFlash drafter and tokenizer for the reference engine, and checking the pair.

Local folders load offline; anything else is taken as a Hugging Face hub id and needs the hub.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ddtree_core.reference.dflash import DFlashDraftModel

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class LoadedModels:
    target: Any  # a transformers causal LM (Qwen3, Llama, ...), eval mode
    drafter: DFlashDraftModel | None
    tokenizer: Any | None  # a transformers tokenizer, None when the folder has none


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """ "auto": bfloat16 on CUDA (as the harness), float32 on the CPU."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in DTYPES:
        raise ValueError(f"dtype must be auto or one of {sorted(DTYPES)}, got {name!r}")
    return DTYPES[name]


def resolve_draft_dtype(name: str, device: torch.device, target_dtype: torch.dtype) -> torch.dtype:
    """The drafter's dtype: "same" (the target's), "auto" or a `resolve_dtype` name.

    "auto" is bfloat16 beside a float32 target on a CPU with native bfloat16 matrix units (oneDNN's check:
    AVX512-BF16 or AMX), where bfloat16 matrix work (most of a draft pass is the head's block x vocab logits)
    is several times cheaper than float32; elsewhere the target's dtype.
    """
    if name == "same":
        return target_dtype
    if name == "auto":
        native_bf16 = device.type == "cpu" and torch.ops.mkldnn._is_mkldnn_bf16_supported()
        return torch.bfloat16 if native_bf16 and target_dtype == torch.float32 else target_dtype
    return resolve_dtype(name, device)


def load_models(
    model: str,
    draft: str | None = None,
    *,
    dtype: str = "auto",
    device: str = "auto",
    attn_implementation: str = "sdpa",
    draft_dtype: str = "same",
) -> LoadedModels:
    """Target (sdpa: the tree mask needs an implementation that takes a 4D mask), drafter, tokenizer.

    `draft_dtype` (`resolve_draft_dtype`) may differ from the target's: the target alone decides the output,
    so a bfloat16 drafter beside a float32 target stays lossless.
    """
    from transformers import AutoModelForCausalLM

    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    local = Path(model).is_dir()
    target = AutoModelForCausalLM.from_pretrained(
        model, dtype=torch_dtype, attn_implementation=attn_implementation, local_files_only=local
    )
    target = target.to(dev).eval()
    drafter = None
    if draft is not None:
        draft_torch_dtype = resolve_draft_dtype(draft_dtype, dev, torch_dtype)
        drafter = DFlashDraftModel.from_pretrained(_local_folder(draft), dtype=draft_torch_dtype, device=dev)
        check_pair(target, drafter)
    return LoadedModels(target=target, drafter=drafter, tokenizer=load_tokenizer(model))


def random_target(
    arch: str = "qwen3",
    *,
    vocab_size: int = 8,
    hidden_size: int = 32,
    num_hidden_layers: int = 4,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    intermediate_size: int = 64,
    init_std: float = 0.3,
    seed: int = 0,
) -> Any:
    """A tiny seeded random Qwen3 or Llama causal LM (float32, sdpa) for tests and CPU smoke runs.

    init_std well above HF's 0.02 spreads the logits, so that argmax ties (where batched and
    single-token forwards may round differently) do not occur in practice.
    """
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    classes = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}
    config_class, model_class = classes[arch]
    config = config_class(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        head_dim=hidden_size // num_attention_heads,
        intermediate_size=intermediate_size,
        initializer_range=init_std,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model_class(config).eval()


def load_tokenizer(model: str) -> Any | None:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model, local_files_only=Path(model).is_dir())
    except (OSError, ValueError):
        return None


def check_pair(target: Any, drafter: DFlashDraftModel) -> None:
    """The drafter reads the target's layers, embeddings and head: sizes must agree."""
    config = target.config.get_text_config() if hasattr(target.config, "get_text_config") else target.config
    if config.hidden_size != drafter.config.hidden_size:
        raise ValueError(f"target hidden_size {config.hidden_size} != drafter {drafter.config.hidden_size}")
    if max(drafter.target_layer_ids) >= config.num_hidden_layers:
        layers = config.num_hidden_layers
        raise ValueError(f"drafter reads target layers {drafter.target_layer_ids}; the target has {layers}")
    vocab = target.get_input_embeddings().weight.shape[0]
    if drafter.mask_token_id is None or not 0 <= drafter.mask_token_id < vocab:
        raise ValueError(f"drafter mask_token_id {drafter.mask_token_id} is not a target token (vocab {vocab})")


def eos_token_ids(target: Any, tokenizer: Any | None) -> tuple[int, ...]:
    """The ids that end a response unless ignore_eos: generation config, model config, tokenizer."""
    ids: list[int] = []
    for source in (getattr(target, "generation_config", None), target.config, tokenizer):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        ids.extend([value] if isinstance(value, int) else list(value or []))
    return tuple(dict.fromkeys(ids))


def _local_folder(path: str) -> str:
    if Path(path).is_dir():
        return path
    from huggingface_hub import snapshot_download

    return snapshot_download(path, allow_patterns=["*.json", "*.safetensors"])
