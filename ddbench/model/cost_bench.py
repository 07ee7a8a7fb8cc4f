"""Verify cost benchmark: time one target verify forward of B trees of N nodes against its floors.

    ddbench model cost --out results/cost/h200
    ddbench model cost --out /tmp/cb --smoke        # tiny decoder, runs on a CPU in seconds

The target is a dense decoder with Qwen3's architecture, built here in plain torch with random weights
(normal * 0.02, seeded) on the device; nothing is downloaded. Preset qwen3-8b has Qwen3-8B's shapes, so a
forward costs what the real model's does; its outputs mean nothing.

A cell (batch B, nodes N) times one verify step: B requests, each a random tree of T = N + 1 tokens (root
and N nodes; N = 0 is plain decoding) after P cached prefix tokens. The step writes the T tokens' K/V into
a preallocated cache and attends to the whole prefix plus each token's tree ancestors through
scaled_dot_product_attention with a dense bool mask [B, T, P + T] (K/V repeated to the query heads), so
attention costs T x (P + T) per request as a FULL_MASK verify does; it returns the logits of all T
positions. Timing: CUDA events around replays of a CUDA graph (eager when capture fails, which the note
says), median of --reps after --warmup; on a CPU the host clock around eager calls. The same step without
the final norm and lm_head is timed beside it (body_ms). With --layers L' below the preset's L, L' layers
are built and timed and time_ms = measured_ms + (L / L' - 1) x body (body_ms = body x L / L').

Floors: bytes = (matmul weights once + the whole KV cache [P + T] once) / peak bandwidth; FLOPs = 2 x
matmul parameters x B x T + 4 x layers x B x T x (P + T) x q_heads x head_dim (the dense attention) / peak
FLOP/s; floor_ms is the larger. The copy bandwidth measured at the start gives copy_floor_ms (bytes only).
The knee of a batch size is the largest T whose time_ms is within 10 % of its T = 1 time_ms. Cells whose
KV cache and temporaries would not fit in free CUDA memory are skipped with the estimate in the note.
Writes cells.csv and run.json to --out and prints a table.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import torch
import torch.nn.functional as F
import typer
from torch import nn

from ddbench import env
from ddbench.kernels.kernel_bench import capture_graph, copy_bandwidth, parse_ints, write_cells_csv
from ddtree_core.mask import ancestor_mask

H200_BANDWIDTH, H200_FLOPS = 4.8e12, 989e12  # peak bytes/s and dense bf16 FLOP/s (anchors.md §5.2)
KNEE_TOLERANCE = 0.10
KNEE_RULE = "per batch size, the largest T = nodes + 1 whose time_ms is within 10 % of that batch's T = 1 time_ms"
MEMORY_SLACK = 1.25  # memory_gb is an estimate: a cell runs if slack x estimate + 1 GiB fits in free memory


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a Qwen3 decoder (no attention bias, untied lm_head): a dense MLP of `intermediate`, or
    with experts > 0 a mixture of `experts` routed experts of `moe_intermediate`, experts_per_token each."""

    hidden: int
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    rope_theta: float = 1e6
    norm_eps: float = 1e-6
    experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0

    @property
    def attention_params(self) -> int:
        """q, k, v and o projections of one layer."""
        return self.hidden * self.head_dim * 2 * (self.q_heads + self.kv_heads)

    @property
    def layer_matmul_params(self) -> int:
        """Every matmul weight of one layer: attention and the MLP (the router and all experts for an MoE)."""
        if self.experts:
            return self.attention_params + self.hidden * self.experts * (1 + 3 * self.moe_intermediate)
        return self.attention_params + 3 * self.hidden * self.intermediate

    @property
    def matmul_params(self) -> int:
        """Every weight a forward multiplies with: the layers and lm_head (not the embedding lookup)."""
        return self.layers * self.layer_matmul_params + self.vocab * self.hidden

    def experts_read(self, tokens: int) -> float:
        """Experts per layer a step of `tokens` tokens reads, routing uniform and independent:
        E (1 - (1 - k / E) ** tokens); E for a dense MLP."""
        if not self.experts:
            return 0.0
        return self.experts * (1 - (1 - self.experts_per_token / self.experts) ** tokens)

    def read_params(self, tokens: int) -> float:
        """Matmul weights a step of `tokens` tokens reads: all of a dense model's; an MoE's attention,
        router and lm_head, and the experts its tokens reach (experts_read)."""
        if not self.experts:
            return float(self.matmul_params)
        expert = 3 * self.hidden * self.moe_intermediate
        layer = self.attention_params + self.hidden * self.experts + self.experts_read(tokens) * expert
        return self.layers * layer + self.vocab * self.hidden

    @property
    def active_params(self) -> int:
        """Matmul weights one token multiplies with (its experts_per_token experts for an MoE)."""
        if not self.experts:
            return self.matmul_params
        mlp = self.hidden * (self.experts + 3 * self.experts_per_token * self.moe_intermediate)
        return self.layers * (self.attention_params + mlp) + self.vocab * self.hidden


PRESETS = {
    "qwen3-8b": ModelShape(hidden=4096, layers=36, q_heads=32, kv_heads=8, head_dim=128, intermediate=12288,
                           vocab=151936),
    "tiny": ModelShape(hidden=64, layers=2, q_heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=512),
}  # fmt: skip
# Shapes this benchmark cannot build (its decoder is dense): timed through SGLang (ddbench.model.cost_sglang).
MOE_PRESETS = {
    "qwen3-coder-30b-a3b": ModelShape(hidden=2048, layers=48, q_heads=32, kv_heads=4, head_dim=128, intermediate=5472,
                                      vocab=151936, rope_theta=1e7, experts=128, experts_per_token=8,
                                      moe_intermediate=768),
}  # fmt: skip


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, dtype: torch.dtype, device: str):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype, device=device), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()  # the statistics in float32, as Qwen3's RMSNorm
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, heads, T, head_dim] rotated by cos, sin [B, 1, T, head_dim] (the rotate-half layout)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def repeat_kv(x: torch.Tensor, q_heads: int) -> torch.Tensor:
    """[B, kv_heads, S, head_dim] -> [B, q_heads, S, head_dim]: query head h reads kv head h // group.
    An expand and a copy (repeat_interleave with an int may sync with the host in some torch versions)."""
    batch, kv_heads, length, head_dim = x.shape
    group = q_heads // kv_heads
    return x[:, :, None].expand(batch, kv_heads, group, length, head_dim).reshape(batch, q_heads, length, head_dim)


class DecoderLayer(nn.Module):
    def __init__(self, shape: ModelShape, weight: Callable[[int, int], nn.Parameter], dtype, device):
        super().__init__()
        self.shape = shape
        heads_dim, norm = shape.q_heads * shape.head_dim, lambda size: RMSNorm(size, shape.norm_eps, dtype, device)
        self.input_norm, self.post_norm = norm(shape.hidden), norm(shape.hidden)
        self.q_norm, self.k_norm = norm(shape.head_dim), norm(shape.head_dim)
        self.q_proj = weight(heads_dim, shape.hidden)
        self.k_proj = weight(shape.kv_heads * shape.head_dim, shape.hidden)
        self.v_proj = weight(shape.kv_heads * shape.head_dim, shape.hidden)
        self.o_proj = weight(shape.hidden, heads_dim)
        self.gate_proj = weight(shape.intermediate, shape.hidden)
        self.up_proj = weight(shape.intermediate, shape.hidden)
        self.down_proj = weight(shape.hidden, shape.intermediate)

    def forward(self, x, rotary, mask, cache, start: int) -> torch.Tensor:
        x = x + self.attention(self.input_norm(x), rotary, mask, cache, start)
        h = self.post_norm(x)
        return x + F.linear(F.silu(F.linear(h, self.gate_proj)) * F.linear(h, self.up_proj), self.down_proj)

    def attention(self, x, rotary, mask, cache, start: int) -> torch.Tensor:
        """x [B, T, hidden]; mask [B, T, start + T] bool; cache [2, B, kv_heads, S, head_dim], S >= start + T.
        Writes this step's K/V at slots start..start + T - 1, then attends to slots 0..start + T - 1."""
        s, (batch, width, _) = self.shape, x.shape
        q = self.q_norm(F.linear(x, self.q_proj).view(batch, width, s.q_heads, s.head_dim)).transpose(1, 2)
        k = self.k_norm(F.linear(x, self.k_proj).view(batch, width, s.kv_heads, s.head_dim)).transpose(1, 2)
        v = F.linear(x, self.v_proj).view(batch, width, s.kv_heads, s.head_dim).transpose(1, 2)
        end = start + width
        cache[0, :, :, start:end] = apply_rotary(k, *rotary)
        cache[1, :, :, start:end] = v
        keys, values = repeat_kv(cache[0, :, :, :end], s.q_heads), repeat_kv(cache[1, :, :, :end], s.q_heads)
        out = F.scaled_dot_product_attention(apply_rotary(q, *rotary), keys, values, attn_mask=mask.unsqueeze(1))
        return F.linear(out.transpose(1, 2).reshape(batch, width, -1), self.o_proj)  # out [B, q_heads, T, hd]


class Decoder(nn.Module):
    """A dense Qwen3-style decoder with random weights; `layers` may be fewer than shape.layers."""

    def __init__(self, shape: ModelShape, layers: int, dtype: torch.dtype, device: str, seed: int):
        super().__init__()
        generator = torch.Generator(device=device).manual_seed(seed)
        weight = lambda rows, cols: nn.Parameter(
            torch.empty(rows, cols, dtype=dtype, device=device).normal_(0.0, 0.02, generator=generator),
            requires_grad=False,
        )
        self.shape, self.dtype, self.device = shape, dtype, device
        self.embed = weight(shape.vocab, shape.hidden)
        self.layers = nn.ModuleList(DecoderLayer(shape, weight, dtype, device) for _ in range(layers))
        self.norm = RMSNorm(shape.hidden, shape.norm_eps, dtype, device)
        self.lm_head = weight(shape.vocab, shape.hidden)
        exponents = torch.arange(0, shape.head_dim, 2, dtype=torch.float32, device=device) / shape.head_dim
        self.register_buffer("inv_freq", 1.0 / shape.rope_theta**exponents, persistent=False)

    def new_cache(self, batch: int, length: int) -> torch.Tensor:
        """Zeroed KV cache [layers, 2 (k, v), B, kv_heads, length, head_dim]."""
        s = self.shape
        return torch.zeros(len(self.layers), 2, batch, s.kv_heads, length, s.head_dim, dtype=self.dtype,
                           device=self.device)  # fmt: skip

    def forward(self, tokens, positions, mask, cache, start: int, logits: bool = True) -> torch.Tensor:
        """tokens, positions [B, T] int64; mask [B, T, start + T] bool, True where a token may attend;
        cache from new_cache with length >= start + T, slots below start holding the prefix. Writes the
        T tokens' K/V at slots start..start + T - 1. Returns logits [B, T, vocab], or with logits=False
        the last layer's output [B, T, hidden] (no final norm, no lm_head)."""
        x = F.embedding(tokens, self.embed)
        angles = positions.unsqueeze(-1).float() * self.inv_freq  # [B, T, head_dim / 2]
        angles = torch.cat([angles, angles], dim=-1).unsqueeze(1)  # [B, 1, T, head_dim]
        rotary = (angles.cos().to(self.dtype), angles.sin().to(self.dtype))
        for layer, layer_cache in zip(self.layers, cache):
            x = layer(x, rotary, mask, layer_cache, start)
        return F.linear(self.norm(x), self.lm_head) if logits else x


@dataclass(frozen=True)
class VerifyTree:
    """One tree per request, node 0 the root (satisfies ddtree_core.encoding.TreeShape)."""

    parents: torch.Tensor  # [B, T] int64, -1 at the root, parents[:, i] < i
    depths: torch.Tensor  # [B, T] int64, root 0
    num_nodes: torch.Tensor  # [B] int64, T - 1 non-root nodes
    max_depth: int


def tree_from_parents(parents: torch.Tensor) -> VerifyTree:
    """parents [B, T] int64 with parents[:, 0] = -1 and 0 <= parents[:, i] < i."""
    batch, width = parents.shape
    nodes = torch.arange(width)
    if (parents[:, 0] != -1).any() or (parents[:, 1:] < 0).any() or (parents[:, 1:] >= nodes[1:]).any():
        raise ValueError("parents must have -1 at the root and 0 <= parents[:, i] < i")
    depths = torch.zeros_like(parents)
    for node in range(1, width):
        depths[:, node] = depths.gather(1, parents[:, node : node + 1]).squeeze(1) + 1
    return VerifyTree(parents, depths, torch.full((batch,), width - 1), int(depths.max()))


def random_tree(batch: int, width: int, generator: torch.Generator) -> VerifyTree:
    """Each node's parent uniform among the nodes before it (on the host)."""
    nodes = torch.arange(width)
    parents = torch.minimum((torch.rand(batch, width, generator=generator) * nodes).long(), nodes - 1)
    parents[:, 0] = -1
    return tree_from_parents(parents)


def verify_mask(tree: VerifyTree, prefix: int) -> torch.Tensor:
    """[B, T, prefix + T] bool: every token sees the whole prefix, itself and its tree ancestors."""
    batch, width = tree.parents.shape
    visible = torch.ones(batch, width, prefix, dtype=torch.bool, device=tree.parents.device)
    return torch.cat([visible, ancestor_mask(tree, impl="torch")], dim=2)


@dataclass(frozen=True)
class Floors:
    weight_bytes: float  # matmul weights read once (an MoE: the experts its tokens reach; norms left out)
    kv_bytes: int  # the whole KV cache [prefix + T] of every layer read once
    flops: int  # matmuls + the dense attention
    bytes_ms: float  # (weight_bytes + kv_bytes) / peak bandwidth
    flops_ms: float  # flops / peak FLOP/s

    @property
    def floor_ms(self) -> float:
        return max(self.bytes_ms, self.flops_ms)

    @property
    def bound(self) -> str:
        """The larger floor: "bytes" or "flops"."""
        return "bytes" if self.bytes_ms >= self.flops_ms else "flops"


def floors(shape: ModelShape, batch: int, width: int, prefix: int, itemsize: int, bandwidth: float,
           flops_per_s: float) -> Floors:  # fmt: skip
    """The bandwidth and compute floors of one verify step of the full model (shape.layers layers)."""
    length = prefix + width
    weight_bytes = shape.read_params(batch * width) * itemsize
    kv_bytes = 2 * shape.layers * batch * shape.kv_heads * length * shape.head_dim * itemsize
    attention = 4 * shape.layers * batch * width * length * shape.q_heads * shape.head_dim  # QK^T and PV
    flops = 2 * shape.active_params * batch * width + attention
    return Floors(weight_bytes, kv_bytes, flops, (weight_bytes + kv_bytes) / bandwidth * 1e3, flops / flops_per_s * 1e3)


def memory_bytes(shape: ModelShape, layers: int, batch: int, width: int, prefix: int, itemsize: int) -> int:
    """Rough bytes a cell needs beside the weights: its KV cache and one forward's temporaries."""
    length, tokens = prefix + width, batch * width
    cache = 2 * layers * batch * shape.kv_heads * length * shape.head_dim * itemsize
    repeated_kv = 2 * batch * shape.q_heads * length * shape.head_dim * itemsize
    masks = 3 * batch * width * length  # the bool mask and its float form inside SDPA
    activations = tokens * (shape.vocab + 3 * shape.intermediate + 8 * shape.hidden) * itemsize
    return cache + repeated_kv + masks + activations + 6 * tokens * shape.hidden * 4  # float32 norm temporaries


@dataclass(frozen=True)
class BenchConfig:
    preset: str
    layers: int  # decoder layers built and timed; fewer than the preset's scale the times (module doc)
    batches: tuple[int, ...]
    nodes: tuple[int, ...]  # tree nodes besides the root: T = nodes + 1
    prefix: int  # cached tokens per request
    reps: int
    warmup: int
    peak_bandwidth: float  # bytes/s
    peak_flops: float  # dense bf16 FLOP/s
    device: str
    dtype: str  # bfloat16 on CUDA, float32 on a CPU
    seed: int


@dataclass(frozen=True)
class CellResult:
    batch: int
    nodes: int
    width: int  # T = nodes + 1 tokens per request
    prefix: int
    time_ms: float | None  # the verify step with lm_head (scaled to the preset's layers)
    body_ms: float | None  # the same without final norm and lm_head (scaled)
    measured_ms: float | None  # time_ms as measured on the built layers
    tokens_per_s: float | None  # B * T / time_ms
    weight_gb: float
    kv_gb: float
    bytes_floor_ms: float
    flops_floor_ms: float
    floor_ms: float
    bound: str  # "bytes" or "flops", the larger floor
    over_floor: float | None  # time_ms / floor_ms
    copy_floor_ms: float | None  # the bytes at the measured copy bandwidth
    memory_gb: float  # estimated cache + temporaries
    graph: bool | None  # both variants replayed from CUDA graphs (None on a CPU)
    knee: bool  # the largest T within the knee tolerance of this batch's T = 1 time
    note: str  # skips, errors, graph fallbacks


def full_config(device: str, seed: int) -> BenchConfig:
    return BenchConfig("qwen3-8b", 36, (1, 4, 16, 32), (0, 15, 31, 63, 127, 255, 511, 1023), 1024, 10, 3,
                       H200_BANDWIDTH, H200_FLOPS, device, _dtype_name(device), seed)  # fmt: skip


def smoke_config(device: str, seed: int) -> BenchConfig:
    return BenchConfig("tiny", 2, (1, 2), (0, 3, 7), 16, 3, 1, H200_BANDWIDTH, H200_FLOPS, device, _dtype_name(device),
                       seed)  # fmt: skip


def _dtype_name(device: str) -> str:
    return "bfloat16" if device.startswith("cuda") else "float32"


def median_ms(fn: Callable[[], object], config: BenchConfig) -> tuple[float, bool | None, str]:
    """Median ms of fn over config.reps calls after config.warmup: (ms, captured in a CUDA graph or None
    on a CPU, note)."""
    if not config.device.startswith("cuda"):
        for _ in range(config.warmup):
            fn()
        times = []
        for _ in range(config.reps):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times), None, ""
    try:
        graph = capture_graph(fn)
    except Exception as error:  # noqa: BLE001 - a capture failure is recorded and timed eagerly
        torch.cuda.synchronize()
        return _event_median_ms(fn, config), False, f"graph capture failed, eager: {_first_line(error)}"
    try:
        return _event_median_ms(graph.replay, config), True, ""
    finally:
        del graph


def _event_median_ms(fn: Callable[[], object], config: BenchConfig) -> float:
    for _ in range(config.warmup):
        fn()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(config.reps)]
    for begin, end in pairs:
        begin.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(begin.elapsed_time(end) for begin, end in pairs)


def run_cell(model: Decoder, config: BenchConfig, batch: int, nodes: int, bandwidth: float | None) -> CellResult:
    """Time one (batch, nodes) cell; a skip or failure becomes its note."""
    shape, width, itemsize = model.shape, nodes + 1, model.dtype.itemsize
    floor = floors(shape, batch, width, config.prefix, itemsize, config.peak_bandwidth, config.peak_flops)
    need = memory_bytes(shape, len(model.layers), batch, width, config.prefix, itemsize)
    base = dict(
        batch=batch, nodes=nodes, width=width, prefix=config.prefix, weight_gb=floor.weight_bytes / 1e9,
        kv_gb=floor.kv_bytes / 1e9, bytes_floor_ms=floor.bytes_ms, flops_floor_ms=floor.flops_ms,
        floor_ms=floor.floor_ms, bound=floor.bound,
        copy_floor_ms=(floor.weight_bytes + floor.kv_bytes) / bandwidth * 1e3 if bandwidth else None,
        memory_gb=need / 1e9,
    )  # fmt: skip
    if config.device.startswith("cuda"):
        torch.cuda.empty_cache()
        free = torch.cuda.mem_get_info()[0]
        if MEMORY_SLACK * need + (1 << 30) > free:
            return _empty_result(base, f"skipped: needs ~{need / 2**30:.1f} GiB (x{MEMORY_SLACK} + 1 GiB), "
                                       f"{free / 2**30:.1f} GiB free")  # fmt: skip
    try:
        return _measure(model, config, batch, width, base)
    except Exception as error:  # noqa: BLE001 - the benchmark records every failure and moves on
        if config.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        return _empty_result(base, f"error: {_first_line(error)}")


def _measure(model: Decoder, config: BenchConfig, batch: int, width: int, base: dict) -> CellResult:
    generator = torch.Generator().manual_seed(config.seed + batch * 7919 + width)
    tree = random_tree(batch, width, generator)
    tokens = torch.randint(0, model.shape.vocab, (batch, width), generator=generator).to(config.device)
    positions = (config.prefix + tree.depths).to(config.device)
    mask = verify_mask(tree, config.prefix).to(config.device)
    cache = model.new_cache(batch, config.prefix + width).normal_()  # random prefix K/V
    with torch.no_grad():
        full, full_graph, full_note = median_ms(lambda: model(tokens, positions, mask, cache, config.prefix), config)
        body, body_graph, body_note = median_ms(
            lambda: model(tokens, positions, mask, cache, config.prefix, logits=False), config
        )
    scale = model.shape.layers / len(model.layers)
    total = full + (scale - 1) * body
    return CellResult(
        **base, time_ms=total, body_ms=body * scale, measured_ms=full, tokens_per_s=batch * width / total * 1e3,
        over_floor=total / base["floor_ms"], graph=None if full_graph is None else full_graph and body_graph,
        knee=False, note="; ".join(note for note in (full_note, body_note) if note),
    )  # fmt: skip


def _empty_result(base: dict, note: str) -> CellResult:
    empty = {f.name: None for f in dataclasses.fields(CellResult) if f.name not in base}
    return CellResult(**{**empty, **base, "knee": False, "note": note})


def _first_line(error: Exception) -> str:
    return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]}"


def knees(results: Sequence) -> dict[int, int | None]:
    """KNEE_RULE for each batch size in results (None where its T = 1 cell has no time)."""
    out = {}
    for batch in sorted({r.batch for r in results}):
        timed = [r for r in results if r.batch == batch and r.time_ms is not None]
        base = next((r.time_ms for r in timed if r.width == 1), None)
        within = [r.width for r in timed if base is not None and r.time_ms <= (1 + KNEE_TOLERANCE) * base]
        out[batch] = max(within) if within else None
    return out


def run(config: BenchConfig, out: Path, echo: Callable[[str], None] = print) -> list[CellResult]:
    """Every cell of the config; writes cells.csv and run.json to out after each cell."""
    out.mkdir(parents=True, exist_ok=True)
    shape = PRESETS[config.preset]
    if not 1 <= config.layers <= shape.layers:
        raise ValueError(f"layers must be 1..{shape.layers} for {config.preset}, got {config.layers}")
    bandwidth = copy_bandwidth(config.device)
    if bandwidth:
        echo(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s (read + write)")
    stamp = env.environment_stamp()
    torch.manual_seed(config.seed)
    model = Decoder(shape, config.layers, getattr(torch, config.dtype), config.device, config.seed)
    results: list[CellResult] = []
    for batch in config.batches:
        for nodes in config.nodes:
            results.append(run_cell(model, config, batch, nodes, bandwidth))
            echo(_one_line(results[-1]))
            marked = knees(results)
            results = [dataclasses.replace(r, knee=marked[r.batch] == r.width) for r in results]
            write_results(out, config, bandwidth, stamp, results)
    return results


def write_results(
    out: Path, config: BenchConfig, bandwidth: float | None, stamp: dict, results: list[CellResult]
) -> None:
    rows = write_cells_csv(out / "cells.csv", results, CellResult)
    shape = PRESETS[config.preset]
    scaled = config.layers < shape.layers
    record = {
        "config": dataclasses.asdict(config),
        "shape": dataclasses.asdict(shape),
        "matmul_params": shape.matmul_params,
        "layers_scaled": f"{config.layers} of {shape.layers} layers timed; time_ms = measured_ms + "
        f"({shape.layers}/{config.layers} - 1) x body, body_ms = body x {shape.layers}/{config.layers}"
        if scaled else None,
        "device": torch.cuda.get_device_name() if config.device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "triton": env.package_version("triton"),
        "timing": "CUDA graph replays timed with CUDA events" if config.device.startswith("cuda") else "host clock",
        "attention": "scaled_dot_product_attention, dense bool mask [B, T, prefix + T], K/V repeated to q heads",
        "copy_bandwidth_bytes_per_s": bandwidth,
        "knee_rule": KNEE_RULE,
        "knees": {str(batch): width for batch, width in knees(results).items()},
        "environment": stamp,
        "cells": rows,
    }  # fmt: skip
    (out / "run.json").write_text(json.dumps(record, indent=1))


def _fmt(value, digits: int = 2) -> str:
    return "-" if value is None else (str(value) if isinstance(value, bool | str) else f"{value:.{digits}f}")


def _one_line(r: CellResult) -> str:
    return (f"B={r.batch} T={r.width}: {_fmt(r.time_ms)} ms (body {_fmt(r.body_ms)}), "
            f"floor {_fmt(r.floor_ms)} ms ({r.bound}) {r.note}")  # fmt: skip


def print_table(results: list[CellResult], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("batch", "T", "ms", "body ms", "tok/s", "KV GB", "floor ms", "bound", "x floor", "copy floor",
                   "graph", "knee", "note"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("bound", "note") else "right")
    for r in results:
        table.add_row(
            str(r.batch), str(r.width), _fmt(r.time_ms), _fmt(r.body_ms), _fmt(r.tokens_per_s, 0), _fmt(r.kv_gb),
            _fmt(r.floor_ms), r.bound, _fmt(r.over_floor), _fmt(r.copy_floor_ms), _fmt(r.graph),
            "*" if r.knee else "", r.note[:60],
        )  # fmt: skip
    Console(width=None if sys.stdout.isatty() else 200).print(table)



def main(
    out: Annotated[Path, typer.Option(help="Folder for cells.csv and run.json.")],
    smoke: Annotated[bool, typer.Option(help="Tiny decoder and grid (runs on a CPU in seconds).")] = False,
    preset: Annotated[str | None, typer.Option(help=f"One of {', '.join(PRESETS)} (default qwen3-8b).")] = None,
    batches: Annotated[str | None, typer.Option(help="Comma list (default 1,4,16,32).")] = None,
    nodes: Annotated[str | None, typer.Option(help="Tree nodes, comma list; T = nodes + 1 (default 0..1023).")] = None,
    prefix: Annotated[int | None, typer.Option(help="Cached tokens per request (default 1024).")] = None,
    reps: Annotated[int | None, typer.Option(help="Timed repetitions per variant, median kept (default 10).")] = None,
    warmup: Annotated[int | None, typer.Option(help="Untimed repetitions first (default 3).")] = None,
    layers: Annotated[int | None, typer.Option(help="Build, time and scale this many layers (default all).")] = None,
    peak_bandwidth: Annotated[float, typer.Option(help="Peak memory bandwidth, bytes/s (H200).")] = H200_BANDWIDTH,
    peak_flops: Annotated[float, typer.Option(help="Peak dense bf16 FLOP/s (H200).")] = H200_FLOPS,
    seed: Annotated[int, typer.Option(help="Seed of the weights, trees and tokens.")] = 0,
) -> None:
    """Time the target verify step of a random Qwen3-shaped decoder over batch x tree nodes; write to --out."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = smoke_config(device, seed) if smoke else full_config(device, seed)
    if preset is not None and preset not in PRESETS:
        raise typer.BadParameter(f"unknown preset {preset!r}; expected one of {', '.join(PRESETS)}")
    preset = preset or config.preset
    config = dataclasses.replace(
        config, preset=preset, layers=layers or PRESETS[preset].layers, batches=parse_ints(batches) or config.batches,
        nodes=parse_ints(nodes) or config.nodes, prefix=config.prefix if prefix is None else prefix,
        reps=reps or config.reps, warmup=config.warmup if warmup is None else warmup, peak_bandwidth=peak_bandwidth,
        peak_flops=peak_flops,
    )  # fmt: skip
    if not 1 <= config.layers <= PRESETS[preset].layers:
        raise typer.BadParameter(f"--layers must be 1..{PRESETS[preset].layers} for {preset}")
    results = run(config, out)
    shape = PRESETS[preset]
    scaled = f", {config.layers} of {shape.layers} layers timed and scaled" if config.layers < shape.layers else ""
    print_table(results, f"Verify step, {preset}, prefix {config.prefix} (ms per step{scaled}); knee *: {KNEE_RULE}")

