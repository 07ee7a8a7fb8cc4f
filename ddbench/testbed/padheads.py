"""Attention-head padding that keeps a target's function, so that it splits over more tensor-parallel ranks.

SGLang splits the query heads and the KV heads of every layer evenly over its TP ranks; the testbed
target's 9 query and 3 KV heads split over neither 2 nor 4 ranks. `pad_attention_heads` writes a copy
of an HF folder (Llama-style weight names `self_attn.{q,k,v,o}_proj`) with more heads that computes
the same function. The new heads are whole GQA groups appended after the original ones:

    query heads   0 1 2 | 3 4 5 | 6 7 8 | 9 10 11     query head i reads KV head i // group,
    KV heads        0   |   1   |   2   |    3        group = num_heads / num_kv_heads = 3 (kept)
                  ------- original -----  -- new --

so every original query head keeps its KV head. The new heads' q/k/v rows (and biases) are zero and
their o_proj columns are zero: each new head's output, whatever its attention weights, is multiplied
by zeros, so the attention block's output, hence every layer's hidden states and the logits, are the
source's. head_dim and hidden_size stay, and config.json names head_dim explicitly (hidden_size /
num_heads no longer gives it). With 12 / 4 heads TP = 2 gives each rank 6 / 2 and TP = 4 gives 3 / 1.
Floating point: the new heads add exact zeros, yet a kernel may order the sum over the longer o_proj
input differently, so an engine can differ from the source in the last bits (HF on CPU: bit-identical).

The DFlash drafter serves the padded target unchanged: it reads the target's hidden states after the
decoder layers `dflash_config.target_layer_ids` (width hidden_size), embeds its block with the target's
embed_tokens and maps its output through the target's lm_head. Padding keeps the layer count, the
hidden size, those two tensors and every layer's hidden states.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

PADDING_FILE = "ddbench_padding.json"
INDEX_FILE = "model.safetensors.index.json"
_ATTENTION = "self_attn."


class HeadPaddingError(ValueError):
    """The requested head counts cannot keep the source's GQA grouping, or the folder is not padable."""


@dataclass(frozen=True)
class HeadPadding:
    """What `pad_attention_heads` did; written as PADDING_FILE in the padded folder."""

    source: str  # the source folder, absolute
    source_num_heads: int  # query heads per layer in the source
    source_num_kv_heads: int
    num_heads: int  # query heads per layer in the padded folder
    num_kv_heads: int
    head_dim: int  # unchanged by padding


def pad_attention_heads(
    src_dir: str | Path, dst_dir: str | Path, *, num_heads: int = 12, num_kv_heads: int = 4
) -> Path:
    """Write `dst_dir`: the HF folder `src_dir` with `num_heads` / `num_kv_heads` attention heads per layer.

    Every file other than config.json and the safetensors weights (tokenizer, chat template,
    generation config, ddbench_manifest.json) is copied as it is. Raises HeadPaddingError unless
    num_heads >= the source's, num_kv_heads >= the source's and num_heads / num_kv_heads equals the
    source's ratio. An existing `dst_dir` is returned untouched if it holds this same padding of
    `src_dir`, else FileExistsError. The folder is built beside `dst_dir` and renamed into place.
    """
    src, dst = Path(src_dir).resolve(), Path(dst_dir).resolve()
    config = json.loads((src / "config.json").read_text())
    padding = _plan(config, str(src), num_heads, num_kv_heads)
    if dst.exists():
        if (dst / PADDING_FILE).is_file() and json.loads((dst / PADDING_FILE).read_text()) == asdict(padding):
            return dst
        raise FileExistsError(f"{dst} exists; remove it or choose another destination")
    dst.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".pad-heads-", dir=dst.parent) as tmp:
        staging = Path(tmp) / dst.name
        staging.mkdir()
        _write_padded(src, staging, config, padding)
        os.replace(staging, dst)
    return dst


def _plan(config: dict, source: str, num_heads: int, num_kv_heads: int) -> HeadPadding:
    """The padding of a model with `config` to the requested counts, or HeadPaddingError why not."""
    if "num_attention_heads" not in config:
        raise HeadPaddingError("config.json has no top-level num_attention_heads (not a Llama-style model?)")
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or config["hidden_size"] // heads)
    if num_heads < heads or num_kv_heads < kv_heads or num_heads * kv_heads != heads * num_kv_heads:
        raise HeadPaddingError(
            f"cannot pad {heads} query / {kv_heads} KV heads to {num_heads} / {num_kv_heads}: both counts must "
            f"not shrink and query heads per KV head must stay {heads / kv_heads:g}, e.g. "
            f"{heads // kv_heads * (kv_heads + 1)} / {kv_heads + 1}"
        )
    return HeadPadding(source, heads, kv_heads, num_heads, num_kv_heads, head_dim)


def _write_padded(src: Path, dst: Path, config: dict, padding: HeadPadding) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    total_bytes, total_parameters, num_padded = 0, 0, 0
    for path in sorted(src.glob("*.safetensors")):
        with safe_open(path, framework="pt") as weights:
            metadata = weights.metadata()
            tensors = {name: weights.get_tensor(name) for name in weights.keys()}
        for name, tensor in tensors.items():
            if _ATTENTION in name:
                tensors[name] = pad_attention_tensor(name, tensor, padding)
                num_padded += tensors[name] is not tensor
        total_bytes += sum(tensor.nbytes for tensor in tensors.values())
        total_parameters += sum(tensor.numel() for tensor in tensors.values())
        save_file(tensors, dst / path.name, metadata=metadata)
    expected = 4 * int(config["num_hidden_layers"])  # q, k, v and o_proj weights of every layer
    if num_padded < expected and padding.num_heads > padding.source_num_heads:
        raise HeadPaddingError(f"{src} has {num_padded} q/k/v/o_proj weights in *.safetensors, expected {expected}+")
    config = config | {
        "num_attention_heads": padding.num_heads,
        "num_key_value_heads": padding.num_kv_heads,
        "head_dim": padding.head_dim,
    }
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if (src / INDEX_FILE).is_file():  # tensor names and shards are unchanged; only the totals grow
        index = json.loads((src / INDEX_FILE).read_text())
        metadata = index.setdefault("metadata", {})
        metadata["total_size"] = total_bytes
        if "total_parameters" in metadata:
            metadata["total_parameters"] = total_parameters
        (dst / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    for path in src.iterdir():
        if path.is_file() and path.suffix != ".safetensors" and path.name not in ("config.json", INDEX_FILE):
            shutil.copy2(path, dst / path.name)
    (dst / PADDING_FILE).write_text(json.dumps(asdict(padding), indent=2) + "\n")


def pad_attention_tensor(name: str, tensor: torch.Tensor, padding: HeadPadding) -> torch.Tensor:
    """`tensor` with zero rows (q/k/v_proj weight and bias) or zero columns (o_proj weight) for the new heads.

    Any other tensor is returned as it is (the same object). Head h of a projection occupies rows (for
    o_proj: columns) h * head_dim .. (h + 1) * head_dim - 1, so appending keeps the original heads in place.
    """
    import torch

    module, _, param = name.rpartition(".")
    module = module.rpartition(".")[2]  # e.g. "q_proj" from "model.layers.0.self_attn.q_proj"
    if module in ("q_proj", "o_proj"):
        old, new = padding.source_num_heads, padding.num_heads
    elif module in ("k_proj", "v_proj"):
        old, new = padding.source_num_kv_heads, padding.num_kv_heads
    else:
        return tensor
    if module == "o_proj" and param != "weight":  # o_proj's bias is per hidden unit
        return tensor
    dim = 1 if module == "o_proj" else 0
    if tensor.shape[dim] != old * padding.head_dim:
        raise HeadPaddingError(f"{name} has shape {tuple(tensor.shape)}, expected {old} heads of {padding.head_dim}")
    if new == old:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = (new - old) * padding.head_dim
    return torch.cat([tensor, tensor.new_zeros(shape)], dim=dim)
