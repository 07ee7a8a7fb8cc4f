"""How DDTree's acceptance gain over DFlash changes with the drafter's strength: a simulation on the AR
outputs of a reference run (CPU, float32, nothing served).

    ddbench model strength results/testbed/reference-cpu --model ~/.cache/ddbench/SmolLM2-135M-Instruct \
        --data-dir ../shared/data --out results/projection/strength

Greedy DFlash and DDTree emit exactly the target's AR tokens y, so a round needs no target forward: from the
bonus token at position p the drafter proposes block positions p+1 .. p+L; DFlash accepts the leading
matches of its argmax chain with y[p+1:], DDTree the deepest tree path that spells y[p+1:]; the round's
acceptance length is matches + 1 (the bonus) and the next round starts at p + that length (cut at the end of
the output, as the engine's counts are). The drafter conditions on the target's features of the committed
prefix y[:p], which one teacher-forced target forward over prompt + y gives for every p; the first round
starts at the first generated token.

A stronger drafter is emulated by a geometric mixture, position by position:
log q = (1 - alpha) log q_drafter + alpha log p_target(. | y[:p+j]) (renormalised), where the second term is
the target's own next-token distribution on the true prefix, the best a drafter could learn; alpha = 0 is
the real drafter (its acceptance must equal the engine's: `check` compares the rounds' histograms with the
run's records), alpha = 1 drafts every token right. The mixture's errors are the drafter's, damped; a
drafter trained longer errs differently, so the curve says how the gain scales, not what a given drafter
gets.

Writes strength.csv (alpha, method, budget, dataset, rounds, tokens, tau, gain over DFlash at that alpha)
and strength.md. With --published (an acceptance file of `ddbench model project`: published DFlash tau per dataset)
it also writes --acceptance-out: the same file with DDTree tau = published DFlash tau x the simulated gain
at that DFlash tau (linear in the simulated DFlash tau between the two nearest alphas; datasets the
simulation lacks keep empty tables), for `ddbench model project --acceptance`.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import torch
import typer

from ddbench.config import AUTO_BUDGET
from ddtree_core.tree import build_tree


@dataclass(frozen=True)
class Trajectory:
    """One prompt's AR output with what every round needs, precomputed."""

    dataset: str
    prompt_index: int
    ids: list[int]  # prompt + AR output
    first: int  # position of the first generated token (the first round's bonus)
    drafts: dict[int, torch.Tensor]  # bonus position p -> the drafter's log-probs [L, V] for p+1 .. p+L
    oracle: torch.Tensor  # [len(ids), V] log p_target(ids[i + 1] | ids[: i + 1]) rows


def round_matches(tree_parents: list[int], tree_tokens: list[int], truth: list[int]) -> int:
    """Depth of the deepest tree path spelling truth[0], truth[1], ... (node i's token: tree_tokens[i - 1])."""
    children = defaultdict(list)
    for node, parent in enumerate(tree_parents):
        if parent >= 0:
            children[parent].append(node)
    node, depth = 0, 0
    while depth < len(truth):
        nxt = next((c for c in children[node] if tree_tokens[c - 1] == truth[depth]), None)
        if nxt is None:
            break
        node, depth = nxt, depth + 1
    return depth


def chain_matches(log_probs: torch.Tensor, truth: list[int]) -> int:
    """Leading positions whose argmax equals the truth (DFlash's chain)."""
    best = log_probs[: len(truth)].argmax(-1).tolist()
    matches = 0
    for guess, token in zip(best, truth):
        if guess != token:
            break
        matches += 1
    return matches


def mixed(trajectory: Trajectory, p: int, alpha: float) -> torch.Tensor:
    """The round's draft log-probs [L, V] at strength alpha (positions past the output keep the drafter's)."""
    draft = trajectory.drafts[p]
    if alpha == 0.0:
        return draft
    rows = min(draft.shape[0], len(trajectory.ids) - 1 - p)
    out = draft.clone()
    out[:rows] = torch.log_softmax((1 - alpha) * draft[:rows] + alpha * trajectory.oracle[p : p + rows], dim=-1)
    return out


def tree_matches(log_probs: torch.Tensor, budget: int, truth: list[int], *, hold_chain: bool = False) -> int:
    """Matches of the round's budget-node tree (hold_chain: the tree that holds DFlash's chain first,
    ddtree_core.tree, so with budget >= L it matches at least what the chain does)."""
    tree = build_tree(log_probs[None], budget, max_depth=log_probs.shape[0], hold_chain=hold_chain, impl="torch")
    return round_matches(tree.parents[0].tolist(), tree.token_ids[0].tolist(), truth)


def simulate(trajectory: Trajectory, alpha: float, budget: int | None, *, with_chain: bool = False) -> list[int]:
    """The rounds' acceptance lengths (bonus included); budget None = DFlash's chain; with_chain: a tree
    that holds the chain (budget >= L)."""
    draft = lambda p: mixed(trajectory, p, alpha)  # noqa: E731
    return greedy_rounds(trajectory.ids, trajectory.first, draft, budget, hold_chain=with_chain)


def greedy_rounds(
    ids: Sequence[int],
    first: int,
    draft: Callable[[int], torch.Tensor],
    budget: int | None,
    *,
    hold_chain: bool = False,
) -> list[int]:
    """The acceptance lengths of the greedy rounds that emit ids[first + 1:], starting from the bonus token at
    `first`; draft(p) gives the block's log-probs [L, V] at bonus position p. The last round is cut at the end."""
    end, p, taus = len(ids) - 1, first, []
    while p < end:
        log_probs = draft(p)
        truth = list(ids[p + 1 : p + 1 + log_probs.shape[0]])
        if budget is None:
            matches = chain_matches(log_probs, truth)
        else:
            matches = tree_matches(log_probs, budget, truth, hold_chain=hold_chain)
        tau = min(matches + 1, end - p)
        taus.append(tau)
        p += tau
    return taus


def trajectory(
    dataset: str, prompt_index: int, prompt: list[int], output: Sequence[int], target, drafter
) -> Trajectory:
    """Teacher-forced target features and log-probs over prompt + output, and the drafter's block at every
    bonus position."""
    from ddtree_core.reference.decode import _features
    from ddtree_core.reference.dflash import DFlashProposer

    ids = list(prompt) + list(output)
    with torch.inference_mode():
        out = target(torch.tensor([ids]), output_hidden_states=True)
        features = _features(out.hidden_states, drafter.target_layer_ids)
        oracle = torch.log_softmax(out.logits[0].float(), dim=-1)
        drafts = {}
        for p in range(len(prompt), len(ids) - 1):
            proposer = DFlashProposer(drafter, target)
            proposer.add_context(features[:, :p])
            drafts[p] = torch.log_softmax(proposer.propose(ids[: p + 1])[0].float(), dim=-1)
    return Trajectory(dataset, prompt_index, ids, len(prompt), drafts, oracle)


def open_run(results: Path, model: str, data_dir: str | None):
    """A results folder's cells, a maker of prompt builders (`builder(records)`: the prompts of requests whose
    earlier turns carried those records' answers, as the client sent them), and the reference engine's target
    and drafter in float32 on the CPU."""
    from transformers import AutoTokenizer

    from ddbench.check.diverge import PromptBuilder
    from ddbench.harness.results import find_run_folder, load_cells
    from ddtree_core.reference.loading import load_models

    folder = find_run_folder(results)
    config = folder.read_manifest()["config"]
    tokenizer = AutoTokenizer.from_pretrained(model)

    base = PromptBuilder(config, tokenizer, (), data_dir)  # the datasets read once
    return load_cells(folder), base.with_answers, load_models(model, config["draft"], dtype="float32", device="cpu")


def load_trajectories(results: Path, model: str, data_dir: str | None, datasets: Sequence[str], limit: int | None):
    """The run's single-turn AR outputs with their prompts, and the engine's records of the other methods."""
    cells, builder_for, models = open_run(results, model, data_dir)
    ar = [r for c in cells if c.cell.method == "ar" for r in c.records]
    builder = builder_for(ar)
    chosen = [r for r in ar if r.dataset in datasets and r.turn == 0]
    chosen = sorted(chosen, key=lambda r: (r.dataset, r.prompt_index))[: limit or None]
    trajectories = [
        trajectory(r.dataset, r.prompt_index, builder.input_ids(r), r.output_ids, models.target, models.drafter)
        for r in chosen
    ]
    return trajectories, cells


def check(trajectories: Sequence[Trajectory], cells) -> tuple[list[str], int]:
    """At alpha = 0, every simulated response's acceptance histogram against the engine's record (its
    meta_info spec_accept_histogram): the mismatches, as lines, and how many responses were compared."""
    by_key = {(t.dataset, t.prompt_index): t for t in trajectories}
    problems, compared = [], 0
    for cell in cells:
        method, budget = cell.cell.method, cell.cell.budget
        if method not in ("dflash", "ddtree") or cell.cell.temperature != 0.0 or budget == AUTO_BUDGET:
            continue  # auto: each round's budget was the server's choice, which the record does not say
        for record in cell.records:
            t = by_key.get((record.dataset, record.prompt_index))
            if t is None or record.turn != 0:
                continue
            taus = simulate(t, 0.0, budget if method == "ddtree" else None)
            compared += 1
            want = list(record.meta_info.get("spec_accept_histogram") or [])
            if not same_but_last(taus, want):
                problems.append(f"{record.cell_id} prompt {record.prompt_index}: simulated {taus}, engine {want}")
    return problems, compared


def same_but_last(taus: Sequence[int], histogram: Sequence[int]) -> bool:
    """Whether the engine's acceptance histogram is that of `taus`, but for the last round, which the engine
    counts whole while the simulation cuts it at the end of the output (the tokens past it are unknown here)."""
    size = max(len(histogram), max(taus, default=0))
    got, want = [0] * size, list(histogram) + [0] * (size - len(histogram))
    for tau in taus:
        got[tau - 1] += 1
    diff = [w - g for w, g in zip(want, got)]
    if not any(diff):
        return True
    moved = [i for i, d in enumerate(diff) if d]
    return len(moved) == 2 and diff[moved[0]] == -1 and diff[moved[1]] == 1 and moved[0] == taus[-1] - 1


def sweep(
    trajectories: Sequence[Trajectory], alphas: Sequence[float], budgets: Sequence[int], chain_budgets=()
) -> list[dict]:
    rows = []
    settings = [(None, False)] + [(b, False) for b in budgets] + [(b, True) for b in chain_budgets]
    for alpha in alphas:
        for budget, with_chain in settings:
            per_dataset = defaultdict(lambda: [0, 0])
            for t in trajectories:
                taus = simulate(t, alpha, budget, with_chain=with_chain)
                per_dataset[t.dataset][0] += len(taus)
                per_dataset[t.dataset][1] += sum(taus)
            for dataset, (rounds, tokens) in sorted(per_dataset.items()):
                method = "dflash" if budget is None else "ddtree+chain" if with_chain else "ddtree"
                rows.append({"alpha": alpha, "method": method, "budget": budget or "", "dataset": dataset,
                             "rounds": rounds, "tokens": tokens, "tau": tokens / rounds})  # fmt: skip
    chain = {(r["alpha"], r["dataset"]): r["tau"] for r in rows if r["method"] == "dflash"}
    for row in rows:
        row["gain"] = row["tau"] / chain[(row["alpha"], row["dataset"])]
    return rows


def gain_at(rows: Sequence[dict], dataset: str, budget: int, chain_tau: float) -> float | None:
    """The simulated DDTree gain at budget for a DFlash tau of chain_tau on dataset: linear between the two
    alphas whose DFlash tau bracket it; None outside the simulated range."""
    points = sorted(
        (chain["tau"], tree["gain"])
        for chain in rows if chain["dataset"] == dataset and chain["method"] == "dflash"
        for tree in rows
        if tree["dataset"] == dataset and tree["method"] == "ddtree" and tree["budget"] == budget
        and tree["alpha"] == chain["alpha"]
    )  # fmt: skip
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= chain_tau <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (chain_tau - x0) / (x1 - x0)
    return None


def derived_acceptance(published: dict, rows: Sequence[dict], budgets: Sequence[int], source: str) -> dict:
    """`published` with DDTree tables from the simulated gains (see the module docstring)."""
    datasets = {}
    for name, entry in published["datasets"].items():
        tables = {}
        for budget in budgets:
            gain = gain_at(rows, name, budget, float(entry["dflash"]))
            if gain is not None:
                tables[str(budget)] = round(min(float(entry["dflash"]) * gain, 16.0), 3)
        datasets[name] = {"dflash": entry["dflash"], "ddtree": tables}
    return {"source": f"{published['source'].strip()} DDTree tau DERIVED (not published): {source}",
            "datasets": datasets}  # fmt: skip


def markdown(rows: Sequence[dict], budgets: Sequence[int], chain_budgets: Sequence[int] = ()) -> str:
    columns = [("ddtree", b, f"DDTree b{b}") for b in budgets] + [
        ("ddtree+chain", b, f"b{b} with the chain") for b in chain_budgets
    ]
    lines = []
    for dataset in sorted({r["dataset"] for r in rows}):
        heads = " | ".join(f"{label} tau (gain)" for _, _, label in columns)
        lines += [f"## {dataset}", "", f"| alpha | DFlash tau | {heads} |", "|---" * (len(columns) + 2) + "|"]
        for alpha in sorted({r["alpha"] for r in rows}):
            cells = {(r["method"], r["budget"]): r for r in rows if r["dataset"] == dataset and r["alpha"] == alpha}
            parts = [f"{cells[m, b]['tau']:.2f} ({cells[m, b]['gain']:.2f}x)" for m, b, _ in columns]
            lines.append(f"| {alpha:g} | {cells['dflash', '']['tau']:.2f} | " + " | ".join(parts) + " |")
        lines.append("")
    return "\n".join(lines)


def main(
    results: Annotated[Path, typer.Argument(help="Reference-engine results with AR, DFlash and DDTree cells.")],
    model: Annotated[str, typer.Option(help="The run's target folder.")],
    out: Annotated[Path, typer.Option(help="Folder for strength.csv and strength.md.")],
    data_dir: Annotated[str | None, typer.Option(help="Local copy of the datasets.")] = None,
    datasets: Annotated[str, typer.Option(help="Single-turn datasets to use.")] = "gsm8k,humaneval",
    alphas: Annotated[str, typer.Option(help="Weights of the target's distribution.")] = "0,0.3,0.5,0.6,0.7,0.8,0.9",
    budgets: Annotated[str, typer.Option(help="DDTree budgets.")] = "15,63,127",
    chain_budgets: Annotated[str, typer.Option(help="Budgets of trees that hold DFlash's chain (>= L).")] = "",
    limit: Annotated[int | None, typer.Option(help="At most this many prompts (smoke runs).")] = None,
    published: Annotated[Path | None, typer.Option(help="Acceptance file with published DFlash tau.")] = None,
    acceptance_out: Annotated[Path | None, typer.Option(help="Where --published's derived copy goes.")] = None,
) -> None:
    """Simulated DFlash and DDTree acceptance as the drafter gets stronger (see the module docstring)."""
    budget_list = [int(b) for b in budgets.split(",")]
    chain_list = [int(b) for b in chain_budgets.split(",") if b]
    trajectories, cells = load_trajectories(results, model, data_dir, datasets.split(","), limit)
    problems, compared = check(trajectories, cells)
    for line in problems:
        typer.echo(f"alpha 0 differs from the engine: {line}", err=True)
    rows = sweep(trajectories, [float(a) for a in alphas.split(",")], budget_list, chain_list)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "strength.csv", "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    header = (f"{len(trajectories)} prompts; alpha 0 checked against the engine's records: "
              f"{len(problems)} of {compared} responses differ\n\n")  # fmt: skip
    text = header + markdown(rows, budget_list, chain_list)
    (out / "strength.md").write_text(text)
    typer.echo(text)
    if published is not None and acceptance_out is not None:
        source = (f"its DFlash tau x the DDTree / DFlash tau gain that `ddbench model strength {results} "
                  f"--budgets {budgets} --alphas {alphas}` simulates at that DFlash tau (a mixture of the testbed "
                  f"drafter with the target's own distribution; see ddbench/model/strength.py)")  # fmt: skip
        derived = derived_acceptance(json.loads(published.read_text()), rows, budget_list, source)
        acceptance_out.write_text(json.dumps(derived, indent=1) + "\n")
    if problems:
        raise typer.Exit(code=1)

