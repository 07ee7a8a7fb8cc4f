"""A drafter's acceptance on the target's greedy outputs, simulated without serving: DFlash's chain and DDTree's
trees at given budgets, tau per dataset. Used to choose between drafters right after training, on the GPU.

    ddbench model accept --target TARGET --draft DRAFTER --answers eval.jsonl --budgets 15,63 [--device cuda]

(`eval.jsonl`: `ddbench testbed distill eval`, the target's greedy answers to the held-out prompts.)

Greedy speculative decoding emits exactly the target's greedy tokens y, so a round needs no target pass: from
the bonus token at position p, DFlash accepts the leading matches of its argmax chain with y[p+1:], DDTree the
deepest path of its tree that spells y[p+1:]; the round's tau is matches + 1 (cut at the end of the answer)
and the next round starts at p + tau, as `ddbench.model.strength.greedy_rounds` (the reference: one
`DFlashProposer` call per visited position) computes it. Here the drafter's block at every answer position
comes from batched passes with the training mask (`ddbench.testbed.train.block_inputs`: each block sees the target
features before its anchor and itself), and the trees of all positions are built at once from their top-K
lists (K = the largest budget, which gives exactly the DDTree tree). The result equals the engine's tau on the
same greedy outputs up to float rounding of the drafter's logits (a test holds it to strength's rounds).

Example: a 128-token answer with DFlash rounds accepting 3, 2, 4, ... gives tau = 128 / rounds.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated

import torch
import typer

from ddbench.model.strength import round_matches
from ddtree_core.policy import expected_accepts
from ddtree_core.reference.decode import _features
from ddtree_core.tree import build_tree_from_topk
from ddtree_core.types import DraftTopK


@torch.inference_mode()
def block_topk(target, drafter, ids: Sequence[int], first: int, k: int, chunk: int = 64) -> DraftTopK:
    """The drafter's top-k log-probs of block positions 1 .. L-1 at every bonus position p = first .. len(ids) - 2,
    as a DraftTopK [P, L - 1, k] (row i: bonus position first + i)."""
    from ddbench.testbed.train import block_inputs

    device = drafter.device
    sequence = torch.tensor([list(ids)], device=device)
    hidden = target(input_ids=sequence, output_hidden_states=True).hidden_states
    features = _features(hidden, drafter.target_layer_ids)
    cfg = SimpleNamespace(block_size=drafter.block_size, mask_token_id=drafter.mask_token_id)
    embed, head = target.get_input_embeddings(), target.get_output_embeddings()
    values, indices = [], []
    anchors = torch.arange(first, len(ids) - 1, device=device)
    for start in range(0, len(anchors), chunk):
        part = anchors[start : start + chunk].unsqueeze(0)
        block_ids, positions, _, mask = block_inputs(sequence, part, torch.tensor([len(ids)], device=device), cfg)
        states = drafter.forward_blocks(embed(block_ids), positions, features, mask)
        logits = head(states.to(head.weight.dtype)).float().view(part.shape[1], drafter.block_size, -1)[:, 1:]
        top = torch.log_softmax(logits, dim=-1).topk(k, dim=-1)
        values.append(top.values)
        indices.append(top.indices)
    return DraftTopK(torch.cat(values).cpu(), torch.cat(indices).cpu())


def rounds(
    ids: Sequence[int], first: int, topk: DraftTopK, budget: int | None, predicted: list | None = None
) -> list[int]:
    """Acceptance lengths of the greedy rounds that emit ids[first + 1:] (budget None: DFlash's chain).
    With `predicted` (a list, DDTree only) it also appends each round's expected accepted nodes under the
    drafter's own probabilities (`ddtree_core.policy.expected_accepts` of the round's tree)."""
    chain = topk.token_ids[:, :, 0].tolist()
    if budget is not None:
        tree = build_tree_from_topk(
            DraftTopK(topk.log_probs[:, :, :budget], topk.token_ids[:, :, :budget]), budget, impl="torch"
        )
        parents, tokens = tree.parents.tolist(), tree.token_ids.tolist()
        expected = expected_accepts(tree)[:, -1].tolist()
    end, p, taus = len(ids) - 1, first, []
    while p < end:
        if predicted is not None and budget is not None:
            predicted.append(expected[p - first])
        row, truth = p - first, list(ids[p + 1 : p + topk.token_ids.shape[1] + 1])
        if budget is None:
            matches = next(
                (j for j, (a, b) in enumerate(zip(chain[row], truth)) if a != b), min(len(truth), len(chain[row]))
            )
        else:
            matches = round_matches(parents[row], tokens[row], truth)
        tau = min(matches + 1, end - p)
        taus.append(tau)
        p += tau
    return taus


def evaluate(target, drafter, answers: Sequence[dict], budgets: Sequence[int], log=None) -> list[dict]:
    """Rows {dataset, method, budget, tau, rounds, tokens, predicted_tau} per dataset (and "all"), DFlash first.
    predicted_tau (DDTree): 1 + the rounds' mean expected accepted nodes under the drafter's own probabilities,
    what `ddtree_core.policy` prices a budget with ((tau - 1) / (predicted_tau - 1) is its calibration)."""
    k = max([1, *budgets])
    methods = [("dflash", None), *(("ddtree", b) for b in budgets)]
    counts: dict[tuple, list[float]] = defaultdict(lambda: [0, 0, 0.0])
    for n, answer in enumerate(answers):
        ids, first = answer["ids"], answer["prompt_len"]
        if len(ids) - first < 2:
            continue
        topk = block_topk(target, drafter, ids, first, k)
        for method, budget in methods:
            predicted: list[float] = []
            taus = rounds(ids, first, topk, budget, predicted)
            for dataset in (answer.get("dataset") or "?", "all"):
                counts[(dataset, method, budget)][0] += len(taus)
                counts[(dataset, method, budget)][1] += sum(taus)
                counts[(dataset, method, budget)][2] += sum(predicted)
        if log and (n + 1) % 50 == 0:
            log(f"{n + 1}/{len(answers)} answers")
    return [
        {"dataset": d, "method": m, "budget": b, "rounds": r, "tokens": t, "tau": round(t / max(r, 1), 3),
         "predicted_tau": round(1 + e / max(r, 1), 3) if m == "ddtree" else None}
        for (d, m, b), (r, t, e) in counts.items()
    ]  # fmt: skip


def table(rows: Sequence[dict]) -> str:
    """Markdown: one line per dataset, tau of DFlash and each budget, and DDTree / DFlash."""
    datasets = list(dict.fromkeys(row["dataset"] for row in rows))
    budgets = sorted({row["budget"] for row in rows if row["budget"] is not None})
    tau = {(row["dataset"], row["budget"]): row["tau"] for row in rows}
    lines = [
        "| dataset | DFlash | " + " | ".join(f"b{b}" for b in budgets) + " | best / DFlash |",
        "|---" * (len(budgets) + 3) + "|",
    ]
    for d in datasets:
        chain = tau[(d, None)]
        best = max((tau[(d, b)] for b in budgets), default=chain)
        cells = " | ".join(f"{tau[(d, b)]:.2f}" for b in budgets)
        lines.append(f"| {d} | {chain:.2f} | {cells} | {best / chain:.2f} |")
    return "\n".join(lines)


def calibration_table(rows: Sequence[dict]) -> str:
    """Markdown: per dataset and budget, tau against the drafter's own prediction (`predicted_tau`)."""
    budgets = sorted({row["budget"] for row in rows if row["budget"] is not None})
    lines = [
        "| dataset | " + " | ".join(f"b{b} tau / predicted" for b in budgets) + " |",
        "|---" * (len(budgets) + 1) + "|",
    ]
    for d in dict.fromkeys(row["dataset"] for row in rows):
        got = {row["budget"]: row for row in rows if row["dataset"] == d and row["budget"] is not None}
        cells = " | ".join(f"{got[b]['tau']:.2f} / {got[b]['predicted_tau']:.2f}" for b in budgets)
        lines.append(f"| {d} | {cells} |")
    return "\n".join(lines)


def main(
    target: Annotated[str, typer.Option(help="The target's folder.")],
    draft: Annotated[str, typer.Option(help="The drafter's folder.")],
    answers: Annotated[
        Path, typer.Option(help="The target's greedy answers, JSONL of `ddbench testbed distill eval`.")
    ],
    budgets: Annotated[str, typer.Option(help="DDTree budgets, comma list.")] = "15,63",
    device: Annotated[str | None, typer.Option(help="cpu | cuda (default: cuda where there is one).")] = None,
    dtype: Annotated[str, typer.Option(help="bfloat16 (as served) or float32.")] = "bfloat16",
    out: Annotated[Path | None, typer.Option(help="Also write the rows as JSON here.")] = None,
) -> None:
    """A drafter's DFlash and DDTree acceptance on the target's greedy answers, simulated without serving: tau per
    dataset and budget (see ddbench/model/accept.py)."""
    from ddtree_core.reference.loading import load_models

    budget_list = [int(b) for b in budgets.split(",") if b]
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    models = load_models(target, draft, dtype=dtype, device=device)
    greedy = [json.loads(line) for line in answers.read_text().splitlines() if line.strip()]
    rows = evaluate(models.target, models.drafter, greedy, budget_list, log=print)
    if out:
        out.write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))
    print()
    print(calibration_table(rows))

