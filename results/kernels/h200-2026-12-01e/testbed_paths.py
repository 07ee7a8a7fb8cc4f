"""Which build the Triton kernel takes on the testbed drafter's real drafts: the build by deviations (TAILS) or the
level build, per round, on the CPU (TRITON_INTERPRET=1).

    TRITON_INTERPRET=1 python3 results/kernels/h200-2026-12-01e/testbed_paths.py MODEL DATA_DIR PROMPTS BUDGETS

MODEL: the prepared SmolLM2-135M-Instruct folder (ddbench testbed prepare); the drafter is ddbench/assets'. For the
first PROMPTS gsm8k and humaneval prompts of ddbench's subsets, greedy DDTree decoding (reference engine, float32,
64 new tokens, the largest of BUDGETS) records each round's draft top-K lists; then every round's tree is built
again by the Triton kernel's default launch at each budget, with `paths`, and checked equal to the reference build.
Prints, per dataset and budget, the rounds TAILS built and those the level build did.
"""

import sys

import torch

import ddtree_core.reference.decode as decode
from ddbench.datasets import chat_messages, load_prompts
from ddtree_core.kernels import tree_build
from ddtree_core.reference import DFlashProposer
from ddtree_core.reference.decode import SamplingConfig, SpecConfig, generate
from ddtree_core.reference.loading import load_models

DRAFT = "ddbench/assets/SmolLM2-135M-Instruct-DFlash-b16"
FIELDS = ("token_ids", "parents", "depths", "num_nodes")


def main(model: str, data_dir: str, prompts: str, budgets: str) -> None:
    models = load_models(model, DRAFT, dtype="float32", device="cpu")
    budgets_ = [int(b) for b in budgets.split(",")]
    recorded = []
    original = decode.build_tree_from_topk

    def record(topk, budget, **kwargs):
        recorded.append((topk, kwargs.get("max_depth") or topk.log_probs.shape[1]))
        return original(topk, budget, **kwargs)

    decode.build_tree_from_topk = record
    for dataset in ("gsm8k", "humaneval"):
        recorded.clear()
        for prompt in load_prompts(dataset, int(prompts), data_dir=data_dir):
            text = models.tokenizer.apply_chat_template(chat_messages(prompt), tokenize=False,
                                                        add_generation_prompt=True)  # fmt: skip
            ids = models.tokenizer(text, add_special_tokens=False)["input_ids"]
            spec = SpecConfig(method="ddtree", budget=max(budgets_))
            generate(models.target, ids, SamplingConfig(max_new_tokens=64), spec,
                     proposer=DFlashProposer(models.drafter, models.target))  # fmt: skip
        for budget in budgets_:
            tails = level = 0
            for topk, depth in recorded:
                paths = torch.zeros(1, dtype=torch.int32)
                tree = tree_build.build_tree_from_topk(topk, budget, depth, budget, paths=paths)
                ref = original(topk, budget, max_depth=depth, impl="reference")
                for field in FIELDS:
                    assert torch.equal(getattr(tree, field), getattr(ref, field)), (dataset, budget, field)
                tails += int(paths.item())
                level += 1 - int(paths.item())
            print(f"{dataset} budget {budget}: {len(recorded)} rounds, TAILS built {tails}, the level build {level};"
                  f" every tree equal to the reference's", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
