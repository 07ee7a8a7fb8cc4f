"""Train a DFlash drafter for a target by self-distillation on the target's own continuations.

1. The target answers every training prompt (greedy, chat template, `max_new_tokens`): the drafter
   learns to predict the target's outputs, which is exactly what verification accepts.
2. Each step takes a batch of those sequences, runs the target once for the features of the drafter's
   target layers, and picks `blocks_per_seq` anchor positions inside each answer. A block is
   [token at the anchor, MASK x (block_size - 1)] at positions anchor .. anchor + block_size - 1; it
   sees the features of the tokens before the anchor (what the draft cache holds at inference, when
   the anchor is the bonus token) and the rest of its own block, never another block. The loss is the
   cross-entropy of the target's next block_size - 1 tokens through the target's frozen lm_head,
   weighted exp(-(k - 1) / decay) at block position k: early positions decide acceptance.
3. With `soft_labels` = a > 0 the cross-entropy at each label is (1 - a) x that of the answer's token + a x
   that of the target's whole next-token distribution there (the softmax of the target's own logits at the
   position before the label, read from the same target pass). An answer sampled at temperature 1 is one
   draw from that distribution: its cross-entropy has the same expected gradient, with the draw's noise;
   the distribution gives the drafter every token's probability, which a tree ranks by. Example: the target
   gives "4" 0.6 and "four" 0.4 after "2 + 2 =" and the answer drew "four": a = 0 teaches "four" alone,
   a = 1 teaches 0.6 / 0.4.

`ddbench testbed train --target DIR --prompts FILE.jsonl --out DIR` (see --help) answers the
prompts with the target's `generate` here; `--answers FILE.jsonl` trains on answers a server wrote
(`ddbench testbed distill train`, much faster on a GPU). A prompt of the held-out evaluation split
(ddbench.heldout) is refused before anything is written (exit status 2).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import torch
import typer
from torch.nn import functional as F

from ddbench.heldout import HeldOutError, check_training_texts
from ddtree_core.reference.dflash import DFlashDraftModel


@dataclass(frozen=True)
class TrainConfig:
    target: str  # HF folder of the target
    prompts: str | None  # JSONL, one {"prompt": str} or {"turns": [str, ...]} per line (first turn used)
    out: str  # drafter folder to write (z-lab DFlash layout)
    mask_token_id: int
    answers: str | None = None  # JSONL of the target's answers (ddbench testbed distill train), instead of prompts
    target_layer_ids: tuple[int, ...] | None = None  # None: evenly spread over the target
    num_target_features: int = 4  # layers captured when target_layer_ids is None
    num_layers: int = 2
    num_heads: int = 8
    num_kv_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 1536
    block_size: int = 16
    max_new_tokens: int = 256  # length of the target's answers used as training data
    sampled_passes: int = 0  # extra answers per prompt sampled at `sample_temperature` (more varied data)
    sample_temperature: float = 0.7
    generate_batch: int = 128
    steps: int = 3000
    batch_size: int = 32  # sequences per step
    blocks_per_seq: int = 8
    lr: float = 6e-4
    warmup: int = 100
    max_seconds: float = 0.0  # > 0: train this long (at most `steps`), the cosine over the wall time
    init: str | None = None  # a drafter folder of the same shape to start from (None: seeded random weights)
    loss_decay: float = 7.0
    soft_labels: float = 0.0  # weight of the target's next-token distribution in the loss (module docstring, 3.)
    seed: int = 0
    device: str = "cuda"


def load_prompt_texts(path: str | Path) -> list[str]:
    texts = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        if "prompt" in record:
            texts.append(str(record["prompt"]))
        elif record.get("turns"):
            texts.append(str(record["turns"][0]))
        else:
            raise ValueError(f"{path}:{number}: expected a 'prompt' or 'turns' field")
    return texts


@torch.inference_mode()
def generate_answers(
    target, tokenizer, texts: list[str], cfg: TrainConfig, log, temperature: float = 0.0
) -> list[tuple[list[int], int]]:
    """(token ids of prompt + answer, prompt length) per prompt: the target's greedy (or sampled) answer."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:  # padding only: masked out of attention, cut from the answers
        tokenizer.pad_token = tokenizer.eos_token
    pad = tokenizer.pad_token_id
    sequences = []
    for start in range(0, len(texts), cfg.generate_batch):
        chunk = texts[start : start + cfg.generate_batch]
        prompts = [
            tokenizer.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
            for t in chunk
        ]
        batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(cfg.device)
        sampling = (
            {"do_sample": True, "temperature": temperature, "top_k": 0} if temperature > 0 else {"do_sample": False}
        )
        out = target.generate(**batch, max_new_tokens=cfg.max_new_tokens, pad_token_id=pad, **sampling)
        width = batch["input_ids"].shape[1]
        for row, attention in zip(out.tolist(), batch["attention_mask"].tolist()):
            prompt_len = sum(attention)
            ids = row[width - prompt_len :]
            answer = ids[prompt_len:]
            while answer and answer[-1] == pad and pad != tokenizer.eos_token_id:
                answer.pop()
            if tokenizer.eos_token_id in answer:
                answer = answer[: answer.index(tokenizer.eos_token_id) + 1]
            sequences.append((ids[:prompt_len] + answer, prompt_len))
        log({"event": "generate", "temperature": temperature, "done": len(sequences) % len(texts) or len(texts)})
    return sequences


def make_batch(sequences, cfg: TrainConfig, pad_id: int, generator: torch.Generator):
    """Padded ids [B, S], anchors [B, A] (-1: unused) for a batch of (ids, prompt_len)."""
    longest = max(len(ids) for ids, _ in sequences)
    ids = torch.full((len(sequences), longest), pad_id, dtype=torch.long)
    anchors = torch.full((len(sequences), cfg.blocks_per_seq), -1, dtype=torch.long)
    for row, (tokens, prompt_len) in enumerate(sequences):
        ids[row, : len(tokens)] = torch.tensor(tokens)
        # An anchor is a committed token whose successor is known: prompt_len - 1 .. len - 2.
        first, last = max(prompt_len - 1, 1), len(tokens) - 2
        if last < first:
            continue
        picks = torch.randint(first, last + 1, (cfg.blocks_per_seq,), generator=generator)
        anchors[row] = picks.sort().values
    return ids, anchors


def block_inputs(ids: torch.Tensor, anchors: torch.Tensor, lengths: torch.Tensor, cfg: TrainConfig):
    """Block token ids, positions, labels [B, A*L] and the attention mask [B, A*L, S + A*L]."""
    batch, seq = ids.shape
    size = cfg.block_size
    offsets = torch.arange(size, device=ids.device)
    positions = (anchors.clamp(min=0).unsqueeze(-1) + offsets).reshape(batch, -1)  # [B, A*L]
    block_ids = torch.full_like(positions, cfg.mask_token_id)
    block_ids.view(batch, -1, size)[:, :, 0] = ids.gather(1, anchors.clamp(min=0))
    label_pos = positions.clamp(max=seq - 1)
    labels = ids.gather(1, label_pos)
    valid = (anchors >= 0).repeat_interleave(size, dim=1) & (positions < lengths.unsqueeze(1))
    valid &= offsets.repeat(anchors.shape[1]).unsqueeze(0) > 0
    labels = torch.where(valid, labels, -100)
    block_of = torch.arange(positions.shape[1], device=ids.device) // size
    anchor_of = anchors.repeat_interleave(size, dim=1)  # [B, Q]
    sees_context = torch.arange(seq, device=ids.device).view(1, 1, -1) < anchor_of.unsqueeze(-1)
    sees_block = block_of.view(1, -1, 1) == block_of.view(1, 1, -1)
    mask = torch.cat([sees_context, sees_block.expand(batch, -1, -1)], dim=-1)
    return block_ids, positions, labels, mask


def train(cfg: TrainConfig) -> Path:
    """Train and save the drafter; HeldOutError, with nothing written, if a training prompt is held out."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (cfg.prompts is None) == (cfg.answers is None):
        raise ValueError("give either prompts (answered here) or answers (`ddbench testbed distill train`), not both")
    if cfg.answers is not None:
        rows = [json.loads(line) for line in Path(cfg.answers).read_text().splitlines() if line.strip()]
        texts = [row["prompt"] for row in rows]
    else:
        texts = load_prompt_texts(cfg.prompts)
    check_training_texts(texts)
    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(cfg.target)
    target = AutoModelForCausalLM.from_pretrained(cfg.target, dtype=torch.bfloat16).to(cfg.device).eval()
    target.requires_grad_(False)
    num_target_layers = target.config.num_hidden_layers
    layer_ids = cfg.target_layer_ids or evenly_spread(num_target_layers, cfg.num_target_features)
    fields = dict(
        hidden_size=target.config.hidden_size,
        num_target_layers=num_target_layers,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        intermediate_size=cfg.intermediate_size,
        vocab_size=target.config.vocab_size,
        block_size=cfg.block_size,
        mask_token_id=cfg.mask_token_id,
        target_layer_ids=list(layer_ids),
        rope_theta=float(getattr(target.config, "rope_theta", None) or 10000.0),
        rms_norm_eps=target.config.rms_norm_eps,
        max_position_embeddings=target.config.max_position_embeddings,
    )
    drafter = DFlashDraftModel.random(seed=cfg.seed, **fields)
    if cfg.init is not None:
        start_from(drafter, cfg.init)
    drafter = drafter.to(cfg.device)
    drafter.train()
    out = Path(cfg.out)  # nothing is written before the inputs are known good
    out.mkdir(parents=True, exist_ok=True)
    log_file = (out / "train_log.jsonl").open("w")
    started = time.time()

    def log(record):
        record = {"t": round(time.time() - started, 2), **record}
        log_file.write(json.dumps(record) + "\n")
        log_file.flush()
        print(json.dumps(record), flush=True)

    log({"event": "config", **asdict(cfg), "target_layer_ids": list(layer_ids)})

    if cfg.answers is not None:
        sequences = [(row["ids"], row["prompt_len"]) for row in rows]
    else:
        sequences = generate_answers(target, tokenizer, texts, cfg, log)
        for _ in range(cfg.sampled_passes):
            sequences += generate_answers(target, tokenizer, texts, cfg, log, cfg.sample_temperature)
    lengths = [len(ids) - p for ids, p in sequences]
    log({"event": "data", "sequences": len(sequences), "answer_tokens": sum(lengths)})
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    fit(drafter, target, sequences, cfg, pad_id, log)
    drafter.to(torch.bfloat16).save_pretrained(out)
    log({"event": "saved", "out": str(out)})
    log_file.close()
    return out


def fit(drafter, target, sequences, cfg: TrainConfig, pad_id: int, log) -> None:
    """AdamW over random batches of `sequences`: linear warmup for `cfg.warmup` steps, then a cosine from
    cfg.lr down to a tenth of it. The cosine runs over `cfg.steps` steps, or with cfg.max_seconds > 0 over the
    wall time (progress = seconds elapsed / max_seconds, training stops at max_seconds or cfg.steps), so slow
    first steps (kernel compilation, caches) neither shorten nor lengthen the run. Example: max_seconds=300,
    warmup=200: full lr from step 200, half of it near 150 s, a tenth at 300 s, whatever the step rate."""
    drafter.train()
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.01)
    generator = torch.Generator().manual_seed(cfg.seed)
    device = drafter.device
    weights = torch.exp(-torch.arange(cfg.block_size, device=device).clamp(min=1).sub(1) / cfg.loss_decay)
    step, started, loss = 0, time.time(), None
    while step < cfg.steps:
        elapsed = time.time() - started
        if cfg.max_seconds > 0 and elapsed >= cfg.max_seconds:
            break
        if cfg.max_seconds > 0:
            progress = elapsed / cfg.max_seconds
        else:
            progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        for group in optimizer.param_groups:
            group["lr"] = cfg.lr * _lr_factor(step, cfg.warmup, progress)
        picks = torch.randint(len(sequences), (cfg.batch_size,), generator=generator).tolist()
        ids, anchors = make_batch([sequences[i] for i in picks], cfg, pad_id, generator)
        ids, anchors = ids.to(device), anchors.to(device)
        lengths = torch.tensor([len(sequences[i][0]) for i in picks], device=device)
        shown = step % 50 == 0
        loss, accuracy = training_loss(drafter, target, ids, anchors, lengths, weights, cfg, accuracy=shown)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        optimizer.step()
        if shown:
            log(
                {
                    "event": "step",
                    "step": step,
                    "t_train": round(elapsed, 1),
                    "lr": optimizer.param_groups[0]["lr"],
                    "loss": round(loss.item(), 4),
                    "acc": [round(a, 3) for a in accuracy],
                }
            )
        step += 1
    last = None if loss is None else round(loss.item(), 4)
    log({"event": "trained", "steps": step, "seconds": round(time.time() - started, 1), "loss": last})
    drafter.eval()


def training_loss(drafter, target, ids, anchors, lengths, weights, cfg: TrainConfig, accuracy: bool = True):
    """Weighted block cross-entropy (against the answer's tokens, and with cfg.soft_labels > 0 also against the
    target's next-token distributions: the module docstring) and the top-1 accuracy per block position (first
    4; [] where `accuracy` is False: the accuracies read the GPU back, four syncs a step)."""
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=ids.is_cuda):
        # logits_to_keep=1: the features are hidden states, so the lm_head over every position would go unused
        hidden = target(input_ids=ids, output_hidden_states=True, logits_to_keep=1).hidden_states
        features = torch.cat([hidden[i + 1] for i in drafter.target_layer_ids], dim=-1)
    block_ids, positions, labels, mask = block_inputs(ids, anchors, lengths, cfg)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=ids.is_cuda):
        embeds = target.get_input_embeddings()(block_ids)
        states = drafter.forward_blocks(embeds, positions, features, mask)
        head = target.get_output_embeddings()
        logits = head(states.to(head.weight.dtype)).float()
    per_token = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="none")
    per_token = per_token.view_as(labels)
    if cfg.soft_labels > 0:
        with torch.no_grad():
            teacher = next_token_logits(target, hidden[-1], positions).float().softmax(-1)
        soft = logits.logsumexp(-1) - (teacher * logits).sum(-1)  # the cross-entropy, as the teacher sums to 1
        per_token = (1 - cfg.soft_labels) * per_token + cfg.soft_labels * torch.where(labels != -100, soft, 0.0)
    k = torch.arange(labels.shape[1], device=ids.device) % cfg.block_size
    w = weights[k].unsqueeze(0).expand_as(labels) * (labels != -100)
    loss = (per_token * w).sum() / w.sum().clamp(min=1)
    if not accuracy:
        return loss, []
    with torch.no_grad():
        hit = (logits.argmax(-1) == labels) & (labels != -100)
        accuracy = [(hit[:, k == j].sum() / (labels[:, k == j] != -100).sum().clamp(min=1)).item() for j in range(1, 5)]
    return loss, accuracy


def next_token_logits(target, last_hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The target's logits for the token at each of `positions` [B, Q]: its lm_head over the final (normed)
    hidden state [B, S, H] of the position before (clamped into the sequence; labels mask what falls out).
    Example: positions [[4, 5]] read the states of positions 3 and 4, whose logits predict tokens 4 and 5."""
    before = (positions - 1).clamp(min=0, max=last_hidden.shape[1] - 1)
    states = last_hidden.gather(1, before.unsqueeze(-1).expand(-1, -1, last_hidden.shape[-1]))
    head = target.get_output_embeddings()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=states.is_cuda):
        return head(states.to(head.weight.dtype))


def evenly_spread(num_layers: int, count: int) -> list[int]:
    """`count` target layers from layer 1 to num_layers - 3, evenly spaced (z-lab's spacing)."""
    if count == 1:
        return [num_layers // 2]
    start, end = 1, num_layers - 3
    return [round(start + i * (end - start) / (count - 1)) for i in range(count)]


def _lr_factor(step: int, warmup: int, progress: float) -> float:
    """Linear warmup over `warmup` steps, then cosine from 1 to 0.1 as `progress` goes from 0 to 1."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, max(0.0, progress))))


class InitError(ValueError):
    """--init names no drafter this run can start from (one line)."""


def start_from(drafter: DFlashDraftModel, path: str | Path) -> None:
    """Copy the weights of the drafter folder `path` into `drafter` (continued training: the cosine restarts,
    the data may be new). Its config must equal `drafter`'s in every field `drafter` has (shape, target layers,
    block size, mask token; the stored dtype aside), else InitError, as for a folder that does not load.
    Example: a 2-layer drafter trained for 480 s, then `--init` it with fresh answers for 480 s more."""
    try:
        start = DFlashDraftModel.from_pretrained(path)
    except Exception as error:  # a missing folder, a truncated safetensors file, a config that is not JSON
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise InitError(f"--init {path}: does not load: {first}") from error
    differ = sorted(k for k, v in drafter.raw_config.items() if k != "dtype" and start.raw_config.get(k) != v)
    if differ:
        raise InitError(f"--init {path}: its drafter differs from the one asked for in {', '.join(differ)}")
    with torch.no_grad():
        drafter.load_state_dict({name: t.to(torch.float32) for name, t in start.state_dict().items()})


def main(
    target: Annotated[str, typer.Option(help="HF folder of the target model.")],
    out: Annotated[str, typer.Option(help="Folder for the drafter and train_log.jsonl.")],
    mask_token_id: Annotated[int, typer.Option(help="Token fed at the masked block positions.")],
    prompts: Annotated[
        str | None, typer.Option(help="Training prompts, JSONL with 'prompt' or 'turns' (answered here).")
    ] = None,
    answers: Annotated[
        str | None, typer.Option(help="Or the target's answers, JSONL of `ddbench testbed distill train`.")
    ] = None,
    target_layer_ids: Annotated[
        str | None, typer.Option(help="Target layers the drafter reads, comma list (default: evenly spread).")
    ] = None,
    num_target_features: Annotated[
        int, typer.Option(help="Target layers read when --target-layer-ids is not given.")
    ] = TrainConfig.num_target_features,
    num_layers: Annotated[int, typer.Option(help="Drafter decoder layers.")] = TrainConfig.num_layers,
    num_heads: Annotated[int, typer.Option(help="Drafter query heads.")] = TrainConfig.num_heads,
    num_kv_heads: Annotated[int, typer.Option(help="Drafter KV heads.")] = TrainConfig.num_kv_heads,
    head_dim: Annotated[int, typer.Option(help="Drafter head dim.")] = TrainConfig.head_dim,
    intermediate_size: Annotated[int, typer.Option(help="Drafter MLP width.")] = TrainConfig.intermediate_size,
    block_size: Annotated[int, typer.Option(help="Drafter block size.")] = TrainConfig.block_size,
    max_new_tokens: Annotated[
        int, typer.Option(help="Length of the target's answers used as training data.")
    ] = TrainConfig.max_new_tokens,
    generate_batch: Annotated[
        int, typer.Option(help="Prompts per generate call when --prompts are answered here.")
    ] = TrainConfig.generate_batch,
    steps: Annotated[int, typer.Option(help="Training steps.")] = TrainConfig.steps,
    batch_size: Annotated[int, typer.Option(help="Sequences per step.")] = TrainConfig.batch_size,
    blocks_per_seq: Annotated[int, typer.Option(help="Blocks per sequence and step.")] = TrainConfig.blocks_per_seq,
    warmup: Annotated[int, typer.Option(help="Learning-rate warm-up steps.")] = TrainConfig.warmup,
    seed: Annotated[int, typer.Option(help="Seed of the drafter's weights and the batches.")] = TrainConfig.seed,
    sampled_passes: Annotated[
        int, typer.Option(help="Extra answers per prompt sampled at --sample-temperature (more varied data).")
    ] = TrainConfig.sampled_passes,
    lr: Annotated[float, typer.Option(help="Peak learning rate.")] = TrainConfig.lr,
    loss_decay: Annotated[
        float, typer.Option(help="Block position k weighs exp(-(k - 1) / decay) in the loss.")
    ] = TrainConfig.loss_decay,
    soft_labels: Annotated[
        float,
        typer.Option(
            help="0-1: weight of the target's next-token distribution (its softmax at each label) against the "
            "answer's token in the loss; 0: the answer's tokens only."
        ),
    ] = TrainConfig.soft_labels,
    sample_temperature: Annotated[
        float, typer.Option(help="Temperature of the sampled passes.")
    ] = TrainConfig.sample_temperature,
    max_seconds: Annotated[
        float, typer.Option(help="> 0: train this long (at most --steps), the cosine over the wall time.")
    ] = TrainConfig.max_seconds,
    device: Annotated[str, typer.Option(help="Device to train on.")] = TrainConfig.device,
    init: Annotated[
        str | None, typer.Option(help="A drafter folder of the same shape to continue training from.")
    ] = None,
) -> None:
    """Train a DFlash drafter for a target by self-distillation on the target's own continuations (see
    ddbench/testbed/train.py); a held-out prompt is refused (exit 2) before anything is written."""
    if (prompts is None) == (answers is None):
        typer.echo("error: give one of --prompts and --answers", err=True)
        raise typer.Exit(code=2)
    if not 0 <= soft_labels <= 1:
        typer.echo(f"error: --soft-labels must lie in [0, 1], got {soft_labels}", err=True)
        raise typer.Exit(code=2)
    settings = dict(locals())  # every parameter is a TrainConfig field
    settings["target_layer_ids"] = tuple(int(x) for x in target_layer_ids.split(",")) if target_layer_ids else None
    try:
        train(TrainConfig(**settings))
    except (HeldOutError, InitError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(code=2) from None
