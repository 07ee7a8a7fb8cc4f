"""Function-preserving inflation: a Llama target (and its DFlash drafter) at the cost of a larger model.

`inflate_target(src, dst, shape)` writes a copy of a Llama-architecture HF folder with a larger shape
(residual width, MLP width, layers, query / KV heads, head dim) that computes the source's function:
the same logits, hence the same greedy text and, with the drafter inflated alike
(`inflate_drafter`), the same draft blocks and acceptance. What changes is the cost: every matrix has
the larger shape, and the weights a kernel reads are non-zero almost everywhere (random where they
cannot matter), so the model runs at the speed of the model whose shape it has (`PRESETS`: Llama-3.1-8B,
Qwen3-8B-like), while accepting what the small testbed pair accepts.

Layout (source width d, new width D; source head dim hd, new hd' = k * hd):

    residual        [ real d | zeros D - d ]        every residual vector keeps its zero tail
    query heads     q head i of GQA group g (i = g * G + j) sits in slot g * G' + j; the slots
                    g * G' + j for j >= G hold extra heads: G' = heads / kv heads >= G, so every real
                    query head keeps its real KV head g; KV heads >= the source's count
    head dims       rotate-half pair p of a head sits at pair k * p: dim p -> k * p and
                    dim hd/2 + p -> hd'/2 + k * p, so RoPE turns it at the same frequency
                    (base^(-2 k p / hd') = base^(-2 p / hd)) and the padded pairs hold zeros
    MLP units       real units first, extra units after; layers: real layers first, extra after

A weight entry that multiplies an input that is always zero is random (N(0, std of the source
tensor), seeded): it costs what a real weight costs and changes nothing. Zero are only the entries
that would let a non-zero value reach what must stay zero:
  - embed_tokens's tail columns (the residual starts with a zero tail);
  - o_proj / down_proj: the tail rows' real columns (the residual keeps its zero tail), o_proj's
    columns of the extra heads on real KV heads (their attention output is not zero);
  - k_proj: the padded dims of real KV heads in the real columns (q . k then sums real dims only);
    v_proj: every row but the real ones in the real columns (extra heads and padded dims output zeros);
  - gate_proj: the extra units' real columns (silu(0) * up = 0, so down_proj's extra columns are free);
  - extra layers: v_proj's and gate_proj's real columns, so attention and MLP add exact zeros;
  - drafter (Qwen3 q_norm over the whole head): q_proj's padded dims of real heads in the real columns;
    fc's tail rows in the real columns of each target layer.
lm_head is written untied: its tail columns are random (they multiply zeros), embed_tokens's are zero.

Scales (exact in real arithmetic; r = d / D, u = hd / hd'):
  - RMSNorm over D sees mean(x^2) * r: epsilon becomes eps * r and every residual norm weight is
    multiplied by sqrt(r), so norm(x) is unchanged;
  - the softmax scale 1/sqrt(hd') is 1/sqrt(hd) * sqrt(u): the target's q_proj is multiplied by
    1/sqrt(u) (q . k grows by it);
  - the drafter normalises q and k per head: its q_proj and k_proj are multiplied by sqrt(r / u), which
    turns q_norm's epsilon eps * r back into eps, and q_norm's weight by sqrt(u), which gives the
    softmax the same product as above.

What is not exact: in bfloat16 each scaled weight is rounded once (relative error <= 2^-9) unless its
factor is a power of two; at 576 -> 4096 (r = 9/64, sqrt(r) = 3/8) and head dim 64 -> 128 those are
the norm weights, the target's q_proj and the drafter's q_proj, k_proj and q_norm. Sums over the
longer rows may also be ordered differently by a kernel. In float32 the inflated model's logits match
the source's to float32 rounding (`inflate_check.compare_targets`); the bfloat16 deviation is measured against the
source in bfloat16 and recorded beside it.

Worked example (hidden 4 -> 8, one head of dim 2 -> 4, MLP 3 -> 5, 1 -> 2 layers): the embedding row
[e0 e1 e2 e3] becomes [e0 e1 e2 e3 0 0 0 0]; q_proj (2 x 4) becomes 4 x 8 with the source's rows at
0 and 2 (pairs 0 -> 0, 1 -> 2 of the rotate-half layout: dim 0 -> 0, dim 1 -> 2), multiplied by
sqrt(2), random elsewhere; the norm weights become [w * sqrt(1/2), ...]; eps becomes eps / 2; layer 1's
v_proj and gate_proj read zeros from the real columns, so layer 1 adds 0 to the residual.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

INFLATION_FILE = "ddbench_inflation.json"
SHARD_BYTES = 4 << 30
DEFAULT_DRAFT_LAYERS = 5  # z-lab's 8B drafters: five decoder layers of the target's width


class InflationError(ValueError):
    """The requested shape cannot hold the source's function, or the folder is not a model we inflate."""


@dataclass(frozen=True)
class Shape:
    """The sizes inflation changes."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, config: dict[str, Any]) -> Shape:
        heads = int(config["num_attention_heads"])
        return cls(
            hidden_size=int(config["hidden_size"]),
            intermediate_size=int(config["intermediate_size"]),
            num_layers=int(config["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or int(config["hidden_size"]) // heads),
        )

    def replace(self, **sizes: int | None) -> Shape:
        """This shape with the given sizes replaced (None keeps a size)."""
        return Shape(**(asdict(self) | {name: value for name, value in sizes.items() if value is not None}))

    def parameters(self, vocab_size: int) -> int:
        """A Llama target's parameters at this shape: untied embedding and lm_head, no biases.

        Llama-3.1-8B: Shape(4096, 14336, 32, 32, 8, 128).parameters(128256) == 8_030_261_248.
        """
        hidden, q_width, kv_width = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        layer = 2 * hidden * q_width + 2 * hidden * kv_width + 3 * hidden * self.intermediate_size + 2 * hidden
        return 2 * vocab_size * hidden + self.num_layers * layer + hidden

    def describe(self) -> str:
        """E.g. "hidden 4096, intermediate 14336, 32 layers, 32/8 heads of 128"."""
        return (
            f"hidden {self.hidden_size}, intermediate {self.intermediate_size}, {self.num_layers} layers, "
            f"{self.num_heads}/{self.num_kv_heads} heads of {self.head_dim}"
        )

    def kv_bytes_per_token(self, itemsize: int = 2) -> int:
        """Keys and values of every layer for one token."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * itemsize


@dataclass(frozen=True)
class Reference:
    """A real model whose shape a preset takes, to set the inflated model beside."""

    name: str
    parameters: int
    kv_bytes_per_token: int  # bfloat16


PRESETS: dict[str, tuple[Shape, Reference]] = {
    "llama3-8b": (Shape(4096, 14336, 32, 32, 8, 128), Reference("Llama-3.1-8B", 8_030_261_248, 131_072)),
    "qwen3-8b": (Shape(4096, 12288, 36, 32, 8, 128), Reference("Qwen3-8B", 8_190_735_360, 147_456)),
}


def check_shape(source: Shape, shape: Shape) -> None:
    """Raise InflationError (one line) unless `shape` can hold `source`'s function as laid out above."""
    for name, old in asdict(source).items():
        new = getattr(shape, name)
        if new < old:
            raise InflationError(f"{name} {new} is smaller than the source's {old}")
    if shape == source:
        raise InflationError(f"the shape equals the source's ({source.describe()}): nothing to inflate")
    if shape.num_heads % shape.num_kv_heads:
        raise InflationError(f"{shape.num_kv_heads} KV heads do not divide {shape.num_heads} query heads")
    if source.num_heads % source.num_kv_heads:
        raise InflationError(f"the source's {source.num_kv_heads} KV heads do not divide its {source.num_heads} heads")
    if shape.hidden_size % shape.num_heads:
        raise InflationError(
            f"hidden_size {shape.hidden_size} is not a multiple of the {shape.num_heads} query heads "
            f"(transformers refuses such Llama configs)"
        )
    group, old_group = shape.num_heads // shape.num_kv_heads, source.num_heads // source.num_kv_heads
    if group < old_group:
        raise InflationError(
            f"{shape.num_heads} / {shape.num_kv_heads} heads give {group} query heads per KV head, fewer than "
            f"the source's {old_group}: a real query head would lose its KV head"
        )
    if shape.head_dim % source.head_dim or source.head_dim % 2:
        raise InflationError(
            f"head_dim {shape.head_dim} is not a multiple of the source's {source.head_dim}: RoPE pairs would "
            f"change frequency"
        )


@dataclass(frozen=True)
class Layout:
    """Where the source's rows and columns land in the inflated tensors (index tensors, int64)."""

    source: Shape
    shape: Shape

    @property
    def residual_ratio(self) -> float:
        return self.source.hidden_size / self.shape.hidden_size

    @property
    def head_ratio(self) -> float:
        return self.source.head_dim / self.shape.head_dim

    def real_hidden(self) -> torch.Tensor:
        return torch.arange(self.source.hidden_size)

    def tail_hidden(self) -> torch.Tensor:
        return torch.arange(self.source.hidden_size, self.shape.hidden_size)

    def head_dims(self) -> torch.Tensor:
        """New position of each source dim within a head: rotate-half pair p goes to pair k * p.

        Example: head dim 4 -> 8 (k = 2): dims [0, 1, 2, 3] -> [0, 2, 4, 6].
        """
        half, new_half, k = (
            self.source.head_dim // 2,
            self.shape.head_dim // 2,
            self.shape.head_dim // self.source.head_dim,
        )
        pairs = torch.arange(half) * k
        return torch.cat([pairs, new_half + pairs])

    def _slots(self, kind: str) -> torch.Tensor:
        """The slot of each source head: query head g * G + j -> g * G' + j; KV head g -> g."""
        if kind == "kv":
            return torch.arange(self.source.num_kv_heads)
        group = self.source.num_heads // self.source.num_kv_heads
        new_group = self.shape.num_heads // self.shape.num_kv_heads
        heads = torch.arange(self.source.num_heads)
        return heads // group * new_group + heads % group

    def head_rows(self, kind: str) -> torch.Tensor:
        """Rows of q_proj ("q") or k/v_proj ("kv") that hold the source's rows, in the source's order."""
        return (self._slots(kind)[:, None] * self.shape.head_dim + self.head_dims()[None, :]).reshape(-1)

    def padded_dims_of_real_heads(self, kind: str) -> torch.Tensor:
        """Rows of the real heads' padded dims."""
        whole = self._slots(kind)[:, None] * self.shape.head_dim + torch.arange(self.shape.head_dim)[None, :]
        return _minus(whole.reshape(-1), self.head_rows(kind))

    def extra_heads_on_real_kv(self) -> torch.Tensor:
        """o_proj columns of the extra query heads whose KV head is real (their output is not zero)."""
        new_group = self.shape.num_heads // self.shape.num_kv_heads
        group = self.source.num_heads // self.source.num_kv_heads
        slots = [g * new_group + j for g in range(self.source.num_kv_heads) for j in range(group, new_group)]
        slots_t = torch.tensor(slots, dtype=torch.long)
        return (slots_t[:, None] * self.shape.head_dim + torch.arange(self.shape.head_dim)[None, :]).reshape(-1)


def _minus(whole: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
    keep = torch.ones(int(whole.max()) + 1 if len(whole) else 0, dtype=torch.bool)
    keep[part] = False
    return whole[keep[whole]]


@dataclass
class _Builder:
    """Makes inflated tensors: random, then the zero blocks, then the source's block (scaled)."""

    device: torch.device
    dtype: torch.dtype
    generator: torch.Generator

    def random(self, shape: tuple[int, ...], std: float) -> torch.Tensor:
        out = torch.empty(shape, dtype=torch.float32, device=self.device)
        return out.normal_(0.0, std if std > 0 else 0.02, generator=self.generator)

    def matrix(
        self,
        shape: tuple[int, int],
        source: torch.Tensor | None,
        rows: torch.Tensor | None = None,
        cols: torch.Tensor | None = None,
        *,
        std: float | None = None,
        scale: float = 1.0,
        zeros: tuple[tuple[torch.Tensor | None, torch.Tensor | None], ...] = (),
    ) -> torch.Tensor:
        """A [shape] matrix: random, zero on each (rows, cols) block of `zeros` (None: all), then
        source * scale at (rows, cols)."""
        out = self.random(shape, std if std is not None else _std(source))
        for zero_rows, zero_cols in zeros:
            zero_rows = torch.arange(shape[0]) if zero_rows is None else zero_rows
            zero_cols = torch.arange(shape[1]) if zero_cols is None else zero_cols
            if len(zero_rows) and len(zero_cols):
                out[zero_rows.to(self.device)[:, None], zero_cols.to(self.device)[None, :]] = 0.0
        if source is not None:
            block = source.to(self.device, torch.float32) * scale
            out[rows.to(self.device)[:, None], cols.to(self.device)[None, :]] = block
        return out.to(self.dtype)

    def vector(self, size: int, source: torch.Tensor, index: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        """A norm weight: the source's entries * scale at `index`, their mean elsewhere (they scale zeros)."""
        values = source.to(self.device, torch.float32) * scale
        out = torch.full((size,), values.mean().item(), dtype=torch.float32, device=self.device)
        out[index.to(self.device)] = values
        return out.to(self.dtype)


def _std(tensor: torch.Tensor | None) -> float:
    return 0.02 if tensor is None else tensor.float().std().item()


class _Weights:
    """The tensors of a safetensors folder (one file or shards), by name, with an optional prefix dropped."""

    def __init__(self, folder: Path, strip: str = ""):
        from safetensors import safe_open

        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise InflationError(f"no *.safetensors in {folder}")
        self._where: dict[str, Any] = {}
        for path in files:
            handle = safe_open(str(path), framework="pt")
            for name in handle.keys():
                self._where[name.removeprefix(strip)] = (handle, name)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._where:
            raise InflationError(f"the source has no tensor {name}")
        handle, stored = self._where[name]
        return handle.get_tensor(stored)


@dataclass(frozen=True)
class Inflation:
    """What an inflation wrote; saved as INFLATION_FILE in the inflated folder."""

    role: str  # "target" or "drafter"
    source: str  # absolute source folder
    source_shape: dict[str, int]
    shape: dict[str, int]
    dtype: str
    device: str
    seed: int
    parameters: int
    kv_bytes_per_token: int  # bfloat16 keys and values of every layer (targets; 0 for drafters)
    rounded: tuple[str, ...]  # scaled weights rounded once in `dtype` (none in float32)
    reference: dict[str, Any] | None = None  # the real model of a preset, beside this one
    check: dict[str, Any] | None = None  # name -> compare_targets' result, when asked for


def _plan(names_and_shapes: list[tuple[str, tuple[int, ...]]], itemsize: int) -> list[list[str]]:
    """Tensor names split into shards of at most SHARD_BYTES each (a larger tensor gets its own)."""
    shards: list[list[str]] = [[]]
    size = 0
    for name, shape in names_and_shapes:
        nbytes = math.prod(shape) * itemsize
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def _write(
    staging: Path,
    specs: dict[str, tuple[tuple[int, ...], Callable[[], torch.Tensor]]],
    dtype: torch.dtype,
    progress: Callable[[int, int], None] | None,
) -> int:
    """Make each tensor and save them as model.safetensors (or shards with an index); returns the parameters."""
    from safetensors.torch import save_file

    itemsize = torch.empty((), dtype=dtype).element_size()
    shards = _plan([(name, shape) for name, (shape, _) in specs.items()], itemsize)
    weight_map, total, done = {}, 0, 0
    for number, names in enumerate(shards, start=1):
        file = "model.safetensors" if len(shards) == 1 else f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        tensors = {}
        for name in names:
            shape, make = specs[name]
            tensor = make()
            if tuple(tensor.shape) != shape:
                raise AssertionError(f"{name}: made {tuple(tensor.shape)}, planned {shape}")
            tensors[name] = tensor.to("cpu").contiguous()
            weight_map[name] = file
            total += tensor.numel()
            done += 1
            if progress is not None:
                progress(done, len(specs))
        save_file(tensors, str(staging / file), metadata={"format": "pt"})
    if len(shards) > 1:
        index = {"metadata": {"total_size": total * itemsize}, "weight_map": weight_map}
        (staging / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return total


_Specs = dict[str, tuple[tuple[int, ...], Callable[[], torch.Tensor]]]


def _layer_specs(
    specs: _Specs,
    prefix: str,
    source: Callable[[str], torch.Tensor],
    real: bool,
    layout: Layout,
    build: _Builder,
    *,
    drafter: bool,
) -> None:
    """The specs of one decoder layer: a real one (the source's layer) or an extra one (adds zeros).

    `source(name)` gives the source layer's tensor (for an extra layer: the last real layer's, read for
    its spread only)."""
    shape, old = layout.shape, layout.source
    hidden, tail = layout.real_hidden(), layout.tail_hidden()
    q_rows, kv_rows = layout.head_rows("q"), layout.head_rows("kv")
    units = torch.arange(old.intermediate_size)
    q_width, kv_width = shape.num_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    r, u = layout.residual_ratio, layout.head_ratio
    q_scale = math.sqrt(r / u) if drafter else 1.0 / math.sqrt(u)
    k_scale = math.sqrt(r / u) if drafter else 1.0

    def add(name: str, size: tuple[int, ...], make: Callable[[], torch.Tensor]) -> None:
        specs[f"{prefix}{name}"] = (size, make)

    def matrix(name: str, size: tuple[int, int], rows=None, cols=None, scale=1.0, zeros=()):
        def make() -> torch.Tensor:
            tensor = source(name)
            block = tensor if real else None
            return build.matrix(size, block, rows, cols, std=_std(tensor), scale=scale, zeros=zeros)

        add(name, size, make)

    def vector(name: str, size: int, index: torch.Tensor, scale: float) -> None:
        add(name, (size,), lambda: build.vector(size, source(name), index, scale))

    attn, mlp = "self_attn.", "mlp."
    if real:
        q_zeros = ((layout.padded_dims_of_real_heads("q"), hidden),) if drafter else ()
        matrix(attn + "q_proj.weight", (q_width, shape.hidden_size), q_rows, hidden, q_scale, q_zeros)
        k_zeros = ((layout.padded_dims_of_real_heads("kv"), hidden),)
        matrix(attn + "k_proj.weight", (kv_width, shape.hidden_size), kv_rows, hidden, k_scale, k_zeros)
        matrix(attn + "v_proj.weight", (kv_width, shape.hidden_size), kv_rows, hidden, 1.0, ((None, hidden),))
        o_zeros = ((tail, q_rows), (None, layout.extra_heads_on_real_kv()))
        matrix(attn + "o_proj.weight", (shape.hidden_size, q_width), hidden, q_rows, 1.0, o_zeros)
        matrix(
            mlp + "gate_proj.weight",
            (shape.intermediate_size, shape.hidden_size),
            units,
            hidden,
            1.0,
            ((None, hidden),),
        )
        matrix(mlp + "up_proj.weight", (shape.intermediate_size, shape.hidden_size), units, hidden)
        matrix(
            mlp + "down_proj.weight", (shape.hidden_size, shape.intermediate_size), hidden, units, 1.0, ((tail, units),)
        )
    else:  # v = 0 and gate = 0 on every input: attention and MLP add exact zeros
        matrix(attn + "q_proj.weight", (q_width, shape.hidden_size))
        matrix(attn + "k_proj.weight", (kv_width, shape.hidden_size))
        matrix(attn + "v_proj.weight", (kv_width, shape.hidden_size), zeros=((None, hidden),))
        matrix(attn + "o_proj.weight", (shape.hidden_size, q_width))
        matrix(mlp + "gate_proj.weight", (shape.intermediate_size, shape.hidden_size), zeros=((None, hidden),))
        matrix(mlp + "up_proj.weight", (shape.intermediate_size, shape.hidden_size))
        matrix(mlp + "down_proj.weight", (shape.hidden_size, shape.intermediate_size))
    norm_scale = math.sqrt(r)
    vector("input_layernorm.weight", shape.hidden_size, hidden, norm_scale)
    vector("post_attention_layernorm.weight", shape.hidden_size, hidden, norm_scale)
    if drafter:
        vector(attn + "q_norm.weight", shape.head_dim, layout.head_dims(), math.sqrt(u))
        vector(attn + "k_norm.weight", shape.head_dim, layout.head_dims(), 1.0)


def _layers(specs: _Specs, prefix: str, weights: _Weights, layout: Layout, build: _Builder, drafter: bool) -> None:
    for layer in range(layout.shape.num_layers):
        real = layer < layout.source.num_layers
        read = min(layer, layout.source.num_layers - 1)
        source = functools.partial(lambda i, name: weights[f"{prefix}{i}.{name}"], read)
        _layer_specs(specs, f"{prefix}{layer}.", source, real, layout, build, drafter=drafter)


def _rounded(layout: Layout, dtype: torch.dtype, drafter: bool) -> tuple[str, ...]:
    """The scaled weights whose factor is not a power of two (rounded once when `dtype` is not float32)."""
    if dtype == torch.float32:
        return ()
    r, u = layout.residual_ratio, layout.head_ratio
    factors = {"residual norm weights": math.sqrt(r)}
    if drafter:
        factors |= {"q_proj": math.sqrt(r / u), "k_proj": math.sqrt(r / u), "q_norm": math.sqrt(u)}
    else:
        factors["q_proj"] = 1 / math.sqrt(u)
    return tuple(name for name, factor in factors.items() if math.frexp(factor)[0] != 0.5)


def inflate_target(
    src_dir: str | Path,
    dst_dir: str | Path,
    shape: Shape,
    *,
    device: str = "cpu",
    dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
    reference: Reference | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Path, Inflation]:
    """Write `dst_dir`: the Llama folder `src_dir` at `shape`, computing the same function (module docstring).

    Raises InflationError (one line) for a shape that cannot hold the source or a folder that is not a
    Llama model without biases; FileExistsError if `dst_dir` holds something else than this inflation
    (the same inflation is returned as it is). The folder is built beside `dst_dir` and renamed into place.
    """
    src = Path(src_dir).resolve()
    config = read_config(src)
    if config.get("model_type") != "llama":
        raise InflationError(f"{src} is a {config.get('model_type')!r} model; only Llama targets are inflated")
    for key in ("attention_bias", "mlp_bias"):
        if config.get(key):
            raise InflationError(f"{src} has {key}; biases are not inflated")
    if config.get("partial_rotary_factor", 1.0) != 1.0:
        raise InflationError(f"{src} rotates part of each head (partial_rotary_factor); not inflated")
    layout = Layout(Shape.of(config), shape)
    check_shape(layout.source, shape)
    record = _record("target", src, layout, dtype, device, seed)
    record = dataclasses.replace(
        record, kv_bytes_per_token=shape.kv_bytes_per_token(), reference=asdict(reference) if reference else None
    )

    def specs_of(build: _Builder) -> _Specs:
        weights = _Weights(src)
        tied = "lm_head.weight" not in weights
        hidden, tail, vocab = layout.real_hidden(), layout.tail_hidden(), int(config["vocab_size"])
        width = (vocab, shape.hidden_size)
        specs: _Specs = {}
        embed = "model.embed_tokens.weight"
        specs[embed] = (
            width,
            lambda: build.matrix(width, weights[embed], torch.arange(vocab), hidden, zeros=((None, tail),)),
        )
        _layers(specs, "model.layers.", weights, layout, build, drafter=False)
        specs["model.norm.weight"] = _norm_spec(build, weights["model.norm.weight"], layout)
        head = embed if tied else "lm_head.weight"
        specs["lm_head.weight"] = (width, lambda: build.matrix(width, weights[head], torch.arange(vocab), hidden))
        return specs

    return _inflate(src, dst_dir, config, record, specs_of, {"tie_word_embeddings": False}, progress)


def inflate_drafter(
    src_dir: str | Path,
    dst_dir: str | Path,
    *,
    target: Shape,
    num_layers: int | None = None,
    device: str = "cpu",
    dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Path, Inflation]:
    """Write `dst_dir`: the DFlash drafter `src_dir` for the target inflated to `target`.

    The drafter takes the target's new width, heads, head dim and MLP width (z-lab's drafters are
    decoder layers of their target's shape) and `num_layers` layers (default: the source's or
    DEFAULT_DRAFT_LAYERS, whichever is more); its target_layer_ids stay (the target's extra layers come
    after its real ones) and num_target_layers becomes `target.num_layers`. It reads the inflated
    target's hidden states and uses its embedding and lm_head, and proposes the source's blocks.
    """
    src = Path(src_dir).resolve()
    config = read_config(src)
    if config.get("attention_bias"):
        raise InflationError(f"{src} has attention_bias; biases are not inflated")
    source = Shape.of(config)
    layers = num_layers if num_layers is not None else max(source.num_layers, DEFAULT_DRAFT_LAYERS)
    shape = target.replace(num_layers=layers)
    layout = Layout(source, shape)
    check_shape(source, shape)
    record = _record("drafter", src, layout, dtype, device, seed)

    def specs_of(build: _Builder) -> _Specs:
        weights = _Weights(src, strip="model.")
        hidden, tail = layout.real_hidden(), layout.tail_hidden()
        fc = weights["fc.weight"]
        num_features = fc.shape[1] // source.hidden_size
        columns = torch.cat([k * shape.hidden_size + hidden for k in range(num_features)])
        fc_shape = (shape.hidden_size, num_features * shape.hidden_size)
        specs: _Specs = {
            "fc.weight": (fc_shape, lambda: build.matrix(fc_shape, fc, hidden, columns, zeros=((tail, columns),))),
            "hidden_norm.weight": _norm_spec(build, weights["hidden_norm.weight"], layout),
        }
        _layers(specs, "layers.", weights, layout, build, drafter=True)
        specs["norm.weight"] = _norm_spec(build, weights["norm.weight"], layout)
        return specs

    return _inflate(src, dst_dir, config, record, specs_of, {"num_target_layers": target.num_layers}, progress)


def _record(role: str, src: Path, layout: Layout, dtype: torch.dtype, device: str, seed: int) -> Inflation:
    """What an inflation will write, before its parameters are counted."""
    return Inflation(
        role=role,
        source=str(src),
        source_shape=asdict(layout.source),
        shape=asdict(layout.shape),
        dtype=str(dtype).removeprefix("torch."),
        device=str(torch.device(device)),
        seed=seed,
        parameters=0,
        kv_bytes_per_token=0,
        rounded=_rounded(layout, dtype, drafter=role == "drafter"),
    )


def _norm_spec(build: _Builder, weight: torch.Tensor, layout: Layout) -> tuple[tuple[int], Callable[[], torch.Tensor]]:
    """A residual RMSNorm weight: the source's entries times sqrt(d / D) at the real dims."""
    size = layout.shape.hidden_size
    return (size,), lambda: build.vector(size, weight, layout.real_hidden(), math.sqrt(layout.residual_ratio))


def _inflate(
    src: Path,
    dst_dir: str | Path,
    config: dict[str, Any],
    record: Inflation,
    specs_of: Callable[[_Builder], _Specs],
    extra_config: dict[str, Any],
    progress: Callable[[int, int], None] | None,
) -> tuple[Path, Inflation]:
    """Write the tensors `specs_of` plans, the config at the new shape (epsilon x d / D, `extra_config`) and
    the source's other files into `dst_dir`, as `_into_place` does; returns the folder and its record."""
    shape, dtype = Shape(**record.shape), getattr(torch, record.dtype)
    ratio = record.source_shape["hidden_size"] / shape.hidden_size

    def build(staging: Path) -> Inflation:
        parameters = _write(staging, specs_of(_builder(record.device, dtype, record.seed)), dtype, progress)
        new = config | _shape_config(shape) | {"rms_norm_eps": float(config["rms_norm_eps"]) * ratio} | extra_config
        _set_dtype(new, dtype)
        _finish(src, staging, new)
        return dataclasses.replace(record, parameters=parameters)

    return _into_place(dst_dir, record, build)


def _builder(device: str, dtype: torch.dtype, seed: int) -> _Builder:
    target = torch.device(device)
    return _Builder(target, dtype, torch.Generator(device=target).manual_seed(seed))


def read_config(folder: Path) -> dict[str, Any]:
    """config.json of a model folder, refused (InflationError) without the sizes inflation reads."""
    path = folder / "config.json"
    if not path.is_file():
        raise InflationError(f"{folder} has no config.json")
    config = json.loads(path.read_text())
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "rms_norm_eps"):
        if key not in config:
            raise InflationError(f"{path} has no {key}")
    return config


def _shape_config(shape: Shape) -> dict[str, int]:
    return {
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_layers,
        "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.num_kv_heads,
        "head_dim": shape.head_dim,
    }


def _set_dtype(config: dict[str, Any], dtype: torch.dtype) -> None:
    name = str(dtype).removeprefix("torch.")
    config["dtype"] = name
    if "torch_dtype" in config:
        config["torch_dtype"] = name


def _finish(src: Path, staging: Path, config: dict[str, Any]) -> None:
    """config.json, and every other file of the source that is not a weight or a record of ours."""
    (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    skip = {"config.json", "model.safetensors.index.json", INFLATION_FILE}
    for path in src.iterdir():
        if path.is_file() and path.suffix != ".safetensors" and path.name not in skip:
            shutil.copy2(path, staging / path.name)


def read_inflation(folder: str | Path) -> Inflation | None:
    path = Path(folder) / INFLATION_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return Inflation(**(data | {"rounded": tuple(data["rounded"])}))


def write_inflation(folder: str | Path, record: Inflation) -> None:
    (Path(folder) / INFLATION_FILE).write_text(json.dumps(asdict(record), indent=2) + "\n")


def _same(a: Inflation, b: Inflation) -> bool:
    """The same inflation, whatever its parameter count or check say."""
    ignore = {"parameters": 0, "check": None}
    return asdict(a) | ignore == asdict(b) | ignore


def _into_place(dst_dir: str | Path, record: Inflation, build: Callable[[Path], Inflation]) -> tuple[Path, Inflation]:
    dst = Path(dst_dir).resolve()
    if dst.exists():
        existing = read_inflation(dst)
        if existing is not None and _same(existing, record):
            return dst, existing
        raise FileExistsError(f"{dst} exists; remove it or choose another destination")
    dst.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".inflate-", dir=dst.parent) as tmp:
        staging = Path(tmp) / dst.name
        staging.mkdir()
        done = build(staging)
        write_inflation(staging, done)
        os.replace(staging, dst)
    return dst, done


def resolve_shape(source: Shape, preset: str | None, sizes: dict[str, int | None]) -> tuple[Shape, Reference | None]:
    """The shape asked for: the preset's (or the source's) sizes, with each given size replacing its own."""
    if preset is None:
        return source.replace(**sizes), None
    if preset not in PRESETS:
        raise InflationError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    shape, reference = PRESETS[preset]
    return shape.replace(**sizes), reference
