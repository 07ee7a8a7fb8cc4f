"""The DFlash block drafter (z-lab), loading z-lab checkpoints unchanged.

A DFlash drafter proposes a whole block in one forward pass. Its input is the block
[bonus, MASK, MASK, ...] embedded with the *target's* embedding table; its output hidden states go
through the *target's* lm_head (the drafter has neither). It conditions on the target: the hidden
states of a few target layers (`target_layer_ids`), concatenated per token, projected by `fc` and
normalised by `hidden_norm`, enter every drafter layer as extra keys/values in front of the block.

    keys/values of layer l:  [ draft cache | new context features | block ]
    positions (RoPE):          0 .. c-1      c .. s-1                s .. s+L-1
    queries:                                                          block only

Attention is non-causal: every block position sees all context and the whole block. Context keys
get k_norm and RoPE at their own token positions, block queries/keys at s .. s+L-1, where s is the
position of the bonus token (the first token not yet run through the target). Only the context
keys/values are cached; the block's are dropped after each pass, which is what the z-lab harness
does when it crops its draft cache to `start` after every draft.

Layer indexing follows z-lab's `extract_context_feature`: layer id i reads HF `hidden_states[i + 1]`,
the output of decoder layer i (hidden_states[0] is the embedding output).

Checkpoint layout (config.json + *.safetensors): Qwen3 decoder-layer fields, `num_target_layers`,
`block_size` (top level or in `dflash_config`), `dflash_config` {target_layer_ids, mask_token_id};
weights `layers.{i}.self_attn.{q,k,v,o}_proj`, `q_norm`, `k_norm`, `mlp.{gate,up,down}_proj`,
`input_layernorm`, `post_attention_layernorm`, `fc`, `hidden_norm`, `norm` (an optional `model.`
prefix is accepted on load).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """z-lab's `build_target_layer_ids`: evenly spaced over layers 1 .. num_target_layers - 3."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    if end < start:
        raise ValueError(f"num_target_layers must be >= 4 for several draft layers, got {num_target_layers}")
    span = end - start
    return [int(round(start + i * span / (num_draft_layers - 1))) for i in range(num_draft_layers)]


def dflash_config(
    *,
    hidden_size: int,
    num_target_layers: int,
    num_hidden_layers: int = 1,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    head_dim: int | None = None,
    intermediate_size: int | None = None,
    vocab_size: int = 32,
    block_size: int = 16,
    mask_token_id: int = 0,
    target_layer_ids: list[int] | None = None,
    rope_theta: float = 1_000_000.0,
    rms_norm_eps: float = 1e-6,
    max_position_embeddings: int = 40960,
) -> dict[str, Any]:
    """A config.json dict in the z-lab DFlash layout."""
    if target_layer_ids is None:
        target_layer_ids = default_target_layer_ids(num_target_layers, num_hidden_layers)
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": hidden_size,
        "num_hidden_layers": num_hidden_layers,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "head_dim": head_dim or hidden_size // num_attention_heads,
        "intermediate_size": intermediate_size or 3 * hidden_size,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "rms_norm_eps": rms_norm_eps,
        "rope_theta": rope_theta,
        "rope_scaling": None,
        "max_position_embeddings": max_position_embeddings,
        "vocab_size": vocab_size,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "num_target_layers": num_target_layers,
        "block_size": block_size,
        "dflash_config": {"target_layer_ids": list(target_layer_ids), "mask_token_id": mask_token_id},
    }


class DraftCache:
    """Per-layer keys/values of the context tokens the drafter has already seen (never block tokens)."""

    def __init__(self, num_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * num_layers  # each [B, H_kv, T, D]
        self.values: list[torch.Tensor | None] = [None] * num_layers  # each [B, H_kv, T, D]
        self.length = 0

    def extended(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The cached keys/values of `layer` followed by `keys`/`values` (not stored)."""
        if self.keys[layer] is None:
            return keys, values
        return torch.cat([self.keys[layer], keys], dim=2), torch.cat([self.values[layer], values], dim=2)

    def store(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.keys[layer], self.values[layer] = keys, values


class DFlashAttention(nn.Module):
    """Qwen3 attention (q/k RMSNorm per head) whose keys/values are [context features | block]."""

    def __init__(self, config: Qwen3Config, layer_idx: int):
        super().__init__()
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        sliding = config.layer_types[layer_idx] == "sliding_attention"
        self.sliding_window = config.sliding_window if sliding else None

    def forward(
        self,
        hidden: torch.Tensor,  # [B, L, H] normed block states
        context: torch.Tensor,  # [B, C, H] projected context features (C may be 0)
        rope: tuple[torch.Tensor, torch.Tensor],  # cos, sin [B, T+C+L, D] for positions cache.length ..
        cache: DraftCache | None,
        layer_idx: int,
        attn_mask: torch.Tensor | None = None,  # [B, 1, L, C+L] bool; training blocks (no cache)
    ) -> torch.Tensor:
        batch, length, _ = hidden.shape
        num_context = context.shape[1]
        both = torch.cat([context, hidden], dim=1)
        q = self.q_norm(self.q_proj(hidden).view(batch, length, self.num_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(both).view(batch, num_context + length, self.num_kv_heads, self.head_dim))
        v = self.v_proj(both).view(batch, num_context + length, self.num_kv_heads, self.head_dim)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        cos, sin = rope
        q = _apply_rope(q, cos[:, num_context:], sin[:, num_context:])
        k = _apply_rope(k, cos, sin)
        k_all, v_all = (k, v) if cache is None else cache.extended(layer_idx, k, v)
        if cache is not None:
            cache.store(layer_idx, *cache.extended(layer_idx, k[:, :, :num_context], v[:, :, :num_context]))
        groups = self.num_heads // self.num_kv_heads
        k_all, v_all = k_all.repeat_interleave(groups, dim=1), v_all.repeat_interleave(groups, dim=1)
        mask = attn_mask if attn_mask is not None else self._window_mask(k_all.shape[2], length, hidden.device)
        out = nn.functional.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask, scale=self.head_dim**-0.5)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1))

    def _window_mask(self, num_keys: int, length: int, device: torch.device) -> torch.Tensor | None:
        """Sliding layers: query at position p sees keys at positions q with |p - q| < window."""
        if self.sliding_window is None:
            return None
        key_pos = torch.arange(num_keys, device=device)
        query_pos = key_pos[-length:].unsqueeze(1)
        return (query_pos - key_pos).abs() < self.sliding_window


class DFlashDecoderLayer(nn.Module):
    """Pre-norm Qwen3 decoder layer; the context features bypass input_layernorm (as in z-lab)."""

    def __init__(self, config: Qwen3Config, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.self_attn = DFlashAttention(config, layer_idx)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden, context, rope, cache: DraftCache | None, attn_mask=None) -> torch.Tensor:
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), context, rope, cache, self.layer_idx, attn_mask)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class DFlashDraftModel(nn.Module):
    """The z-lab DFlash drafter: Qwen3-style layers over [context features | block], no embedding/head."""

    def __init__(self, config: dict[str, Any]):
        super().__init__()
        self.raw_config = dict(config)
        self.config = _qwen3_config(config)
        spec = config.get("dflash_config") or {}
        num_layers = self.config.num_hidden_layers
        self.num_target_layers = int(spec.get("num_target_layers", config.get("num_target_layers", num_layers)))
        ids = spec.get("target_layer_ids") or default_target_layer_ids(self.num_target_layers, num_layers)
        self.target_layer_ids: tuple[int, ...] = tuple(int(i) for i in ids)
        self.mask_token_id = _optional_int(spec.get("mask_token_id", config.get("mask_token_id")))
        self.block_size = int(spec.get("block_size", config.get("block_size", 16)))
        hidden = self.config.hidden_size
        self.layers = nn.ModuleList(DFlashDecoderLayer(self.config, i) for i in range(num_layers))
        self.fc = nn.Linear(len(self.target_layer_ids) * hidden, hidden, bias=False)
        self.hidden_norm = Qwen3RMSNorm(hidden, eps=self.config.rms_norm_eps)
        self.norm = Qwen3RMSNorm(hidden, eps=self.config.rms_norm_eps)
        self.rope = _Rope(self.config)

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def new_cache(self) -> DraftCache:
        return DraftCache(len(self.layers))

    def forward(
        self,
        block_embeds: torch.Tensor,  # [B, L, H] target embeddings of [bonus, MASK, ...]
        context_features: torch.Tensor,  # [B, C, len(target_layer_ids) * H] target features not yet cached
        cache: DraftCache,
    ) -> torch.Tensor:
        """Hidden states of the block [B, L, H] (after the final norm); caches the C context tokens."""
        num_context, length = context_features.shape[1], block_embeds.shape[1]
        context = self.hidden_norm(self.fc(context_features.to(self.dtype)))
        positions = torch.arange(cache.length, cache.length + num_context + length, device=block_embeds.device)
        rope = self.rope(block_embeds, positions.unsqueeze(0).expand(block_embeds.shape[0], -1))
        hidden = block_embeds.to(self.dtype)
        for layer in self.layers:
            hidden = layer(hidden, context, rope, cache)
        cache.length += num_context
        return self.norm(hidden)

    def forward_blocks(
        self,
        block_embeds: torch.Tensor,  # [B, Q, H] target embeddings of several blocks, concatenated
        block_positions: torch.Tensor,  # [B, Q] position of every block token
        context_features: torch.Tensor,  # [B, S, F] target features of positions 0 .. S-1
        attn_mask: torch.Tensor,  # [B, Q, S + Q] bool: which context and block tokens each query sees
    ) -> torch.Tensor:
        """Hidden states [B, Q, H] of many blocks in one pass, for training: the mask gives each block
        its own context prefix and itself, as `forward` does for one block at inference."""
        batch, num_context = context_features.shape[:2]
        context = self.hidden_norm(self.fc(context_features.to(self.dtype)))
        context_positions = torch.arange(num_context, device=block_embeds.device).expand(batch, -1)
        rope = self.rope(block_embeds, torch.cat([context_positions, block_positions], dim=1))
        hidden = block_embeds.to(self.dtype)
        for layer in self.layers:
            hidden = layer(hidden, context, rope, None, attn_mask.unsqueeze(1))
        return self.norm(hidden)

    @classmethod
    def from_pretrained(
        cls, path: str | Path, *, dtype: torch.dtype | None = None, device: str | torch.device = "cpu"
    ) -> DFlashDraftModel:
        """Load a z-lab checkpoint folder (config.json + one or more *.safetensors)."""
        folder = Path(path)
        config = json.loads((folder / CONFIG_NAME).read_text())
        weights = _read_weights(folder)
        with torch.device("meta"):
            model = cls(config)
        missing = set(model.state_dict()) - set(weights)
        unexpected = set(weights) - set(model.state_dict())
        if missing or unexpected:
            raise ValueError(f"{folder}: missing weights {sorted(missing)}, unexpected {sorted(unexpected)}")
        model.load_state_dict(weights, assign=True)
        return model.to(device=device, dtype=dtype or model.dtype).eval()

    def save_pretrained(self, path: str | Path) -> None:
        """Write config.json and model.safetensors in the layout `from_pretrained` (and SGLang) reads."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        config = dict(self.raw_config, dtype=str(self.dtype).removeprefix("torch."))
        (folder / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
        tensors = {name: t.detach().contiguous().cpu() for name, t in self.state_dict().items()}
        save_file(tensors, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})

    @classmethod
    def random(cls, *, seed: int = 0, init_std: float = 0.02, **config_fields: Any) -> DFlashDraftModel:
        """A drafter with seeded N(0, init_std) weights (norms 1); `config_fields` are `dflash_config`'s."""
        model = cls(dflash_config(**config_fields))
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("norm.weight"):
                    param.fill_(1.0)
                else:
                    param.copy_(torch.randn(param.shape, generator=generator) * init_std)
        return model.eval()


class _Rope:
    """RoPE cos/sin from float32 inverse frequencies. Kept out of the module tree so that casting the
    drafter to bfloat16 never rounds the frequencies (HF computes them in float32 too)."""

    def __init__(self, config: Qwen3Config):
        with torch.device("cpu"):
            self.module = Qwen3RotaryEmbedding(config)

    def __call__(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.module.inv_freq.device != x.device:
            self.module.to(x.device)
        return self.module(x, positions)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Neox-style rotary embedding; x [B, heads, T, D], cos/sin [B, T, D]."""
    cos, sin = cos.unsqueeze(1).to(x.dtype), sin.unsqueeze(1).to(x.dtype)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def _qwen3_config(config: dict[str, Any]) -> Qwen3Config:
    fields = {k: v for k, v in config.items() if k not in ("architectures", "auto_map", "dflash_config")}
    qwen3 = Qwen3Config(**fields)
    if qwen3.head_dim is None:
        qwen3.head_dim = qwen3.hidden_size // qwen3.num_attention_heads
    return qwen3


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _read_weights(folder: Path) -> dict[str, torch.Tensor]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {folder}")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        for name, tensor in load_file(str(file)).items():
            weights[name.removeprefix("model.")] = tensor
    return weights


class DraftHead:
    """The target's lm_head as a drafter uses it: its rows in the drafter's dtype, all of them or only those of a
    draft vocabulary. Built once per server and shared by its requests' proposers.

    A draft vocabulary keeps the `draft_vocab` lowest token ids and `keep` (the end-of-sequence ids wherever
    they sit), so the drafter proposes only those tokens. Byte-level BPE vocabularies number their tokens in
    merge order, roughly by falling frequency, so the lowest ids are the common ones. It is lossless, as any
    drafter is: the target verifies every proposal. The head's GEMM shrinks in proportion, which matters
    where it is a large part of the round (a float32 head of 49,152 rows on a CPU: 22 ms of a ~200 ms round).

    Example: vocab 49,152, draft_vocab 16,384, keep (2,) -> vocab_ids 0 .. 16,383; keep (49,151,) ->
    0 .. 16,383 and 49,151; draft_vocab None or >= 49,152 -> all rows, vocab_ids None.
    """

    def __init__(
        self, target: nn.Module, dtype: torch.dtype, draft_vocab: int | None = None, keep: tuple[int, ...] = ()
    ):
        head = target.get_output_embeddings()
        vocab = head.weight.shape[0]
        if draft_vocab is not None and draft_vocab < 1:
            raise ValueError(f"draft_vocab must be >= 1, got {draft_vocab}")
        self.vocab_ids: torch.Tensor | None = None  # [V'] the token id of each row; None: all rows, in order
        # A drafter in another dtype than the target's (a bfloat16 drafter beside a float32 target on a CPU)
        # drafts through its own copy of the head in its dtype; the logits come back in the target's.
        weight = head.weight.detach()
        bias = None if getattr(head, "bias", None) is None else head.bias.detach()
        if draft_vocab is not None and draft_vocab < vocab:
            extra = sorted({int(t) for t in keep if draft_vocab <= int(t) < vocab})
            ids = torch.cat([torch.arange(draft_vocab), torch.tensor(extra, dtype=torch.long)])
            self.vocab_ids = ids.to(weight.device)
            weight = weight[self.vocab_ids]
            bias = None if bias is None else bias[self.vocab_ids]
        self.weight = weight.to(dtype).contiguous()
        self.bias = None if bias is None else bias.to(dtype)
        self.logits_dtype = head.weight.dtype

    def __call__(self, states: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(states.to(self.weight.dtype), self.weight, self.bias).to(self.logits_dtype)


class DFlashProposer:
    """Runs a DFlashDraftModel against one target for one sequence: the draft side of a decode loop.

    Context features arrive with `add_context` (the prompt after prefill, the accepted path after each
    round) and are written into the draft cache by the next `propose`, which drafts block positions
    1 .. block_size - 1 after the bonus token. `head` (default: the target's whole lm_head) may hold a draft
    vocabulary: `propose` then gives logits over its rows and `vocab_ids` maps a row to its token id.
    """

    def __init__(
        self,
        drafter: DFlashDraftModel,
        target: nn.Module,
        block_size: int | None = None,
        head: DraftHead | None = None,
    ):
        if drafter.mask_token_id is None:
            raise ValueError("the drafter config has no dflash_config.mask_token_id")
        self.drafter = drafter
        self.block_size = drafter.block_size if block_size is None else int(block_size)
        if not 2 <= self.block_size:
            raise ValueError(f"block_size must be >= 2, got {self.block_size}")
        self.layer_ids = drafter.target_layer_ids
        self._embed = target.get_input_embeddings()
        self._head = DraftHead(target, drafter.dtype) if head is None else head
        self.vocab_ids = self._head.vocab_ids
        self._cache = drafter.new_cache()
        self._pending: list[torch.Tensor] = []  # each [1, n, F]

    def add_context(self, features: torch.Tensor) -> None:
        """Target features [1, n, F] of the next n committed tokens."""
        self._pending.append(features)

    def propose(self, tokens: list[int]) -> torch.Tensor:
        """Draft logits [1, block_size - 1, V] for the positions after tokens[-1] (the bonus token); V is the
        head's rows (token vocab_ids[j] for row j where the head has a draft vocabulary)."""
        context = torch.cat(self._pending, dim=1)
        self._pending = []
        if self._cache.length + context.shape[1] != len(tokens) - 1:
            raise RuntimeError(
                f"draft context covers {self._cache.length + context.shape[1]} tokens, expected {len(tokens) - 1}"
            )
        device = self._embed.weight.device
        block = torch.full((1, self.block_size), self.drafter.mask_token_id, dtype=torch.long, device=device)
        block[0, 0] = tokens[-1]
        hidden = self.drafter(self._embed(block), context, self._cache)
        states = hidden[0, 1:].contiguous()  # 2D: a strided 3D input takes bmm + copies
        return self._head(states).unsqueeze(0)
