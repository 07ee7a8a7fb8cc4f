"""Where greedy speculative outputs leave AR's, and whether the target itself calls it a near-tie.

Greedy speculative decoding is lossless in exact arithmetic, but a serving engine runs the target in bf16
with different kernels for a one-token decode step and a many-token verify, so two tokens whose logits
are almost equal can swap places and the two outputs part ways from there. A real bug (wrong mask, wrong
position, wrong KV slot) makes the same kind of divergence, but at tokens the target does not consider
close. This module tells them apart:

- for every greedy request of a results folder whose output differs from AR's on the same prompt, the
  first divergence (`metrics.first_divergence`: index k, AR's token a, the other's token b);
- the target re-run offline in float32 (transformers, CPU or GPU) on the prompt plus the shared first k
  output tokens, and `metrics.logit_margin` there: gap = logit(a) - logit(b), the top-1 / top-2 tokens
  and their margin, and which side the float32 target prefers;
- a divergence is a near-tie when |gap| <= tie_threshold (logits, default TIE_THRESHOLD).

Later turns of a multi-turn prompt whose history already differs (the prompt hashes differ) are
skipped: their first divergence is the earlier turn's. The prompt of each analysed request is rebuilt
from the dataset, the chat template and AR's earlier answers, and checked against the recorded prompt
hash, so a mismatch is reported rather than silently analysed on the wrong prompt.
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ddbench.config import DDBenchError, build_config
from ddbench.datasets import chat_messages
from ddbench.harness.client import chat_input_ids, load_prompts
from ddbench.harness.results import CellResult, RequestRecord, RunFolder, find_run_folder, load_cells, prompt_hash
from ddtree_core import metrics

# bf16 keeps 8 significant bits: logits of magnitude 16..32 are stored 0.125 apart, and a verify and a
# decode step accumulate their rounding differently through every layer; gaps up to a few such steps are
# what kernel-order noise produces.
TIE_THRESHOLD = 0.5
CSV_COLUMNS = (
    "cell_id", "method", "budget", "concurrency", "dataset", "prompt_index", "turn", "position",
    "ar_token", "other_token", "logit_ar", "logit_other", "gap", "top1_token", "top2_token", "top_margin",
    "preferred", "near_tie",
)  # fmt: skip


@dataclass(frozen=True)
class Pending:
    """A request whose greedy output differs from AR's on the same prompt."""

    record: RequestRecord
    ar: RequestRecord
    divergence: metrics.Divergence


@dataclass(frozen=True)
class DivergenceRow:
    """One analysed divergence (CSV_COLUMNS)."""

    cell_id: str
    method: str
    budget: int | None
    concurrency: int
    dataset: str
    prompt_index: int
    turn: int
    position: int
    ar_token: int | None
    other_token: int | None
    logit_ar: float | None
    logit_other: float | None
    gap: float | None  # logit_ar - logit_other; None when one output simply ended first
    top1_token: int
    top2_token: int
    top_margin: float
    preferred: str  # "ar" | "other" | "neither": whose token is the float32 target's top-1
    near_tie: bool

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class CellDivergence:
    """Per cell: how many greedy requests matched AR, diverged (near-tie or not), or were skipped."""

    cell_id: str
    compared: int
    identical: int
    near_ties: int
    not_ties: int
    history_differs: int  # later turns whose prompt already differs from AR's
    max_abs_gap: float | None


def pending_divergences(results: Sequence[CellResult]) -> tuple[list[Pending], dict[str, dict[str, int]]]:
    """Differing greedy requests and per-cell counts {compared, identical, history_differs}."""
    ar_by_key: dict[tuple, RequestRecord] = {}
    ar_cells = [r for r in results if r.status == "done" and r.cell.method == "ar"]
    for result in sorted(ar_cells, key=lambda r: -r.cell.concurrency):  # concurrency 1 wins
        for record in result.records:
            ar_by_key[(record.dataset, record.temperature, record.prompt_index, record.turn)] = record
    pending, counts = [], {}
    for result in results:
        cell = result.cell
        if result.status != "done" or cell.method == "ar" or cell.temperature != 0:
            continue
        count = counts.setdefault(cell.cell_id, {"compared": 0, "identical": 0, "history_differs": 0})
        for record in result.records:
            ar = ar_by_key.get((record.dataset, record.temperature, record.prompt_index, record.turn))
            if ar is None:
                continue
            if ar.prompt_hash != record.prompt_hash:
                count["history_differs"] += 1
                continue
            count["compared"] += 1
            divergence = metrics.first_divergence(ar.output_ids, record.output_ids)
            if divergence is None:
                count["identical"] += 1
            else:
                pending.append(Pending(record, ar, divergence))
    return pending, counts


class PromptBuilder:
    """The token ids a request was sent: dataset prompt, AR's earlier answers, chat template (as the client)."""

    def __init__(self, manifest_config: dict, tokenizer, ar_records: Sequence[RequestRecord], data_dir: str | None):
        config = build_config(manifest_config, {"data_dir": data_dir})
        self._tokenizer = tokenizer
        self._prompts = {label: {p.index: p for p in prompts} for label, prompts in load_prompts(config).items()}
        self._answers = {(r.dataset, r.prompt_index, r.turn): r.output_ids for r in ar_records}

    def with_answers(self, records: Sequence[RequestRecord]) -> PromptBuilder:
        """The same builder with `records`' answers as the earlier turns (one cell's own, as its client sent)."""
        builder = copy.copy(self)
        builder._answers = {(r.dataset, r.prompt_index, r.turn): r.output_ids for r in records}
        return builder

    def input_ids(self, record: RequestRecord) -> list[int]:
        prompt = self._prompts.get(record.dataset, {}).get(record.prompt_index)
        if prompt is None:
            raise DDBenchError(f"{record.cell_id}: prompt {record.prompt_index} is not in {record.dataset}")
        answers = [
            self._tokenizer.decode(list(self._answers[(record.dataset, record.prompt_index, turn)]),
                                   skip_special_tokens=True)
            for turn in range(record.turn)
        ]  # fmt: skip
        ids = chat_input_ids(self._tokenizer, chat_messages(prompt, answers))
        if prompt_hash(ids) != record.prompt_hash:
            raise DDBenchError(
                f"{record.cell_id} prompt {record.prompt_index} turn {record.turn}: the rebuilt prompt's hash "
                f"differs from the recorded one (other data, tokenizer or chat template than the run's)"
            )
        return ids


def analyse(
    pending: Sequence[Pending],
    input_ids: Callable[[RequestRecord], list[int]],
    next_logits: Callable[[list[int]], object],
    *,
    tie_threshold: float = TIE_THRESHOLD,
    on_row: Callable[[], None] = lambda: None,
) -> list[DivergenceRow]:
    """One DivergenceRow per pending divergence. next_logits(ids) -> [V] logits for the token after ids;
    equal contexts (several cells leaving AR at the same place) are evaluated once."""
    cache: dict[tuple[int, ...], object] = {}
    rows = []
    for item in pending:
        record, divergence = item.record, item.divergence
        context = tuple(input_ids(record)) + tuple(item.ar.output_ids[: divergence.index])
        if context not in cache:
            cache[context] = next_logits(list(context))
        margin = metrics.logit_margin(cache[context], divergence)
        gap = None if margin.logit_a is None or margin.logit_b is None else margin.logit_a - margin.logit_b
        preferred = (
            "ar" if margin.top1_token == divergence.token_a else "other" if margin.top1_token == divergence.token_b
            else "neither"
        )  # fmt: skip
        rows.append(
            DivergenceRow(
                cell_id=record.cell_id, method=record.method, budget=record.budget, concurrency=record.concurrency,
                dataset=record.dataset, prompt_index=record.prompt_index, turn=record.turn,
                position=divergence.index, ar_token=divergence.token_a, other_token=divergence.token_b,
                logit_ar=margin.logit_a, logit_other=margin.logit_b, gap=gap, top1_token=margin.top1_token,
                top2_token=margin.top2_token, top_margin=margin.margin, preferred=preferred,
                near_tie=gap is not None and abs(gap) <= tie_threshold,
            )  # fmt: skip
        )
        on_row()
    return rows


def cell_divergences(rows: Sequence[DivergenceRow], counts: dict[str, dict[str, int]]) -> list[CellDivergence]:
    out = []
    for cell_id, count in counts.items():
        mine = [row for row in rows if row.cell_id == cell_id]
        gaps = [abs(row.gap) for row in mine if row.gap is not None]
        out.append(
            CellDivergence(
                cell_id=cell_id,
                compared=count["compared"],
                identical=count["identical"],
                near_ties=sum(row.near_tie for row in mine),
                not_ties=sum(not row.near_tie for row in mine),
                history_differs=count["history_differs"],
                max_abs_gap=max(gaps) if gaps else None,
            )
        )
    return out


def target_logits_fn(model_path: str, *, dtype: str = "float32", device: str = "cpu") -> Callable:
    """next_logits(ids) -> [V] float32 logits of the target at the last position (transformers)."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype)).to(device).eval()
    except (OSError, ValueError) as error:
        raise DDBenchError(f"cannot load the target {model_path}: {str(error).splitlines()[0]}") from error

    @torch.inference_mode()
    def next_logits(ids: list[int]):
        tensor = torch.tensor([ids], device=device)
        return model(tensor, logits_to_keep=1).logits[0, -1].float().cpu()

    return next_logits


def run(
    results_path: str | Path,
    *,
    model: str | None,
    data_dir: str | None,
    tie_threshold: float = TIE_THRESHOLD,
    dtype: str = "float32",
    device: str = "cpu",
    progress: Callable[[int], Callable[[], None]] | None = None,
) -> tuple[list[DivergenceRow], list[CellDivergence]]:
    """Analyse a results folder (see the module docstring)."""
    from transformers import AutoTokenizer

    folder: RunFolder = find_run_folder(results_path)
    config = folder.read_manifest()["config"]
    results = load_cells(folder)
    pending, counts = pending_divergences(results)
    model = model or config["model"]
    if not Path(model).exists():
        raise DDBenchError(f"target model {model} not found; pass --model (the run's target folder)")
    tokenizer = AutoTokenizer.from_pretrained(model)
    # A later turn's prompt carries its own cell's earlier answers (as the client sent them); a pending
    # request's prompt equals its AR twin's, so either cell's answers rebuild it, but not another AR cell's.
    builder = PromptBuilder(config, tokenizer, (), data_dir)
    by_cell = {result.cell.cell_id: builder.with_answers(result.records) for result in results}
    on_row = progress(len(pending)) if progress else (lambda: None)
    next_logits = target_logits_fn(model, dtype=dtype, device=device) if pending else None
    rows = analyse(pending, lambda record: by_cell[record.cell_id].input_ids(record), next_logits,
                   tie_threshold=tie_threshold, on_row=on_row)  # fmt: skip
    return rows, cell_divergences(rows, counts)


def write(out: Path, rows: Sequence[DivergenceRow], cells: Sequence[CellDivergence], tie_threshold: float) -> None:
    """out/divergences.csv (one row per divergence) and out/divergences.md (the per-cell table)."""
    import csv
    import io

    from ddbench.harness.results import write_atomic

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    writer.writerows(row.to_dict() for row in rows)
    write_atomic(out / "divergences.csv", buffer.getvalue())
    write_atomic(out / "divergences.md", markdown(rows, cells, tie_threshold))


def markdown(rows: Sequence[DivergenceRow], cells: Sequence[CellDivergence], tie_threshold: float) -> str:
    lines = [
        f"Near-tie: |logit(AR token) - logit(other token)| <= {tie_threshold:g} for the float32 target at the first "
        "divergence.",
        "",
        "| cell | compared | identical | near-tie | not a tie | max abs gap | history differs |",
        "|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        gap = "-" if cell.max_abs_gap is None else f"{cell.max_abs_gap:.3f}"
        lines.append(
            f"| {cell.cell_id} | {cell.compared} | {cell.identical} | {cell.near_ties} | {cell.not_ties} | {gap} "
            f"| {cell.history_differs} |"
        )
    lines += ["", "| method | divergences | median abs gap | max abs gap | float32 top-1: AR / other / neither |",
              "|---|---|---|---|---|"]  # fmt: skip
    for method in sorted({row.method for row in rows}):
        mine = [row for row in rows if row.method == method]
        gaps = sorted(abs(row.gap) for row in mine if row.gap is not None)
        median = f"{statistics.median(gaps):.3f}" if gaps else "-"
        top = "-" if not gaps else f"{max(gaps):.3f}"
        counts = " / ".join(str(sum(row.preferred == side for row in mine)) for side in ("ar", "other", "neither"))
        lines.append(f"| {method} | {len(mine)} | {median} | {top} | {counts} |")
    worst = sorted((row for row in rows if not row.near_tie), key=lambda row: -abs(row.gap or float("inf")))
    if worst:
        lines += ["", "Divergences that are not near-ties (largest gap first):", ""]
        lines += [
            f"- {row.cell_id} prompt {row.prompt_index} turn {row.turn} @ {row.position}: AR {row.ar_token} "
            f"vs {row.other_token}, gap {row.gap if row.gap is None else round(row.gap, 3)}, float32 top-1 "
            f"{row.top1_token} ({row.preferred})"
            for row in worst[:20]
        ]
    return "\n".join(lines) + "\n"
