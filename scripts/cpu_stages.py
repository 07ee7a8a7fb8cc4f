"""Where a round's time goes in the reference engine on a CPU: tokens/s, tau and ms per round by stage (draft,
tree build, tree compile, verify, commit) for AR, DFlash and DDTree (reference heap and torch tree paths).

    python scripts/cpu_stages.py --threads 2 --dtype float32 --prompts 2 --out stages.json
    python scripts/cpu_stages.py --draft-dtype bfloat16 --cases ar,dflash,b4,b8,b16,auto64 --repeats 3

The testbed pair (`ddbench testbed prepare` target, bundled drafter), the first held-out GSM8K prompts, T = 0,
64 new tokens, one process; timing on (ddtree_core.reference.decode's stage clock); the drafter's vocabulary
as the server's --draft-vocab takes it (auto: 16,384 ids on a CPU). AR's "verify" is its
decode steps, counted per response (its tau is the response length). `autoN` is budget=auto up to N, priced as
the reference server prices it (its verify cost measured here first). With --repeats R the cases run in R
interleaved passes; the last lines give each case's median tok/s and its speedup over the same pass's AR
(median, min-max).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from ddbench.harness.client import chat_input_ids
from ddbench.heldout import eval_prompts
from ddbench.testbed.target import DRAFTER_DIR, default_cache_dir
from ddtree_core.policy import AutoBudget, auto_budgets
from ddtree_core.reference.cost import measure_verify_cost
from ddtree_core.reference.decode import SamplingConfig, SpecConfig, generate
from ddtree_core.reference.dflash import DFlashProposer, DraftHead
from ddtree_core.reference.loading import eos_token_ids, load_models
from ddtree_core.reference.server import draft_vocab_size
from ddtree_core.settings import TreeSettings

DEFAULT_CASES = "ar,dflash,b64-reference,b64,b32,b16"


def case_spec(name: str) -> SpecConfig:
    """ar, dflash, bN (DDTree at budget N, torch tree path), bN-reference (the host heap) or autoN."""
    if name in ("ar", "dflash"):
        return SpecConfig(method=name, tree_impl="torch")
    if name.startswith("auto") and name[4:].isdigit():
        return SpecConfig(method="ddtree", tree=TreeSettings(int(name[4:]), None, auto=True), tree_impl="torch")
    budget, _, impl = name.removeprefix("b").partition("-")
    if not name.startswith("b") or not budget.isdigit() or impl not in ("", "reference"):
        raise SystemExit(f"--cases: {name!r} is not ar, dflash, bN, bN-reference or autoN")
    return SpecConfig(method="ddtree", tree=TreeSettings(int(budget), None), tree_impl=impl or "torch")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="float32", help="float32 (the CPU default) or bfloat16")
    parser.add_argument("--draft-dtype", default="same", help="the drafter's: same (as --dtype), float32, bfloat16")
    parser.add_argument("--cases", default=DEFAULT_CASES, help=f"comma list (default {DEFAULT_CASES})")
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--data-dir", help="the offline dataset mirror (default: $DDBENCH_DATA_DIR)")
    parser.add_argument("--model", default=str(default_cache_dir() / "SmolLM2-135M-Instruct"))
    parser.add_argument("--repeats", type=int, default=1, help="interleaved passes over the cases")
    parser.add_argument("--draft-vocab", default="auto", help="the drafter's vocabulary, as the server's flag")
    parser.add_argument("--out", help="also write the rows as JSON here")
    args = parser.parse_args()
    cases = {name: case_spec(name) for name in args.cases.split(",")}
    torch.set_num_threads(args.threads)
    models = load_models(args.model, str(DRAFTER_DIR), dtype=args.dtype, device="cpu", draft_dtype=args.draft_dtype)
    prompts = [
        chat_input_ids(models.tokenizer, [{"role": "user", "content": p.turns[0]}])
        for p in eval_prompts("gsm8k", data_dir=args.data_dir)[: args.prompts]
    ]
    sampling = SamplingConfig(max_new_tokens=64)
    vocab = draft_vocab_size(args.draft_vocab, models.target)
    head = DraftHead(models.target, models.drafter.dtype, vocab, eos_token_ids(models.target, models.tokenizer))
    generate(models.target, prompts[0], SamplingConfig(max_new_tokens=8), SpecConfig(method="ar"))  # warm-up
    autos = {}
    for name, spec in cases.items():
        if spec.tree.auto:
            budgets = auto_budgets(spec.tree.budget)
            cost = measure_verify_cost(models.target, (1,) + tuple(b + 1 for b in budgets))
            print(json.dumps({"case": name, "verify_tokens": cost.tokens, "verify_ms": cost.ms}), flush=True)
            autos[name] = AutoBudget(cost, budgets)
    rows = []
    for repeat in range(1, args.repeats + 1):
        for name, spec in cases.items():
            tokens = seconds = rounds = nodes = 0
            stages: dict[str, float] = {}
            for prompt in prompts:
                proposer = None if spec.method == "ar" else DFlashProposer(models.drafter, models.target, head=head)
                out = generate(models.target, prompt, sampling, spec, proposer=proposer, timing=True,
                               auto=autos.get(name))  # fmt: skip
                tokens, seconds = tokens + out.num_tokens, seconds + out.decode_time
                rounds += max(len(out.rounds), 1)
                nodes += sum(stats.num_nodes for stats in out.rounds)
                for stage, value in vars(out.stage_times).items():
                    stages[stage] = stages.get(stage, 0.0) + value
            row = {"case": name, "repeat": repeat, "tok_per_s": round(tokens / seconds, 1),
                   "tau": round(tokens / rounds, 2), "mean_nodes": round(nodes / rounds, 1),
                   "ms_per_round": round(1000 * seconds / rounds, 1),
                   **{f"{stage}_ms": round(1000 * value / rounds, 1) for stage, value in stages.items()}}  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    for name in cases:
        mine = [row for row in rows if row["case"] == name]
        ratios = [
            row["tok_per_s"] / ar["tok_per_s"]
            for row in mine
            for ar in rows
            if ar["case"] == "ar" and ar["repeat"] == row["repeat"]
        ]
        summary = {"case": name, "median_tok_per_s": statistics.median(row["tok_per_s"] for row in mine)}
        if ratios:
            summary |= {"x_ar": round(statistics.median(ratios), 2), "x_ar_min": round(min(ratios), 2),
                        "x_ar_max": round(max(ratios), 2)}  # fmt: skip
        print(json.dumps(summary), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
