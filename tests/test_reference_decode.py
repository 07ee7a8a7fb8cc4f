"""Reference decoding loops: speculative greedy output == target-only greedy output, full acceptance
with a perfect proposer, sampled outputs follow the target's distribution, stops and records."""

import collections
import copy
import dataclasses
import functools
import math

import pytest
import torch

from ddtree_core import metrics, verify
from ddtree_core.policy import AutoBudget, CostTable, auto_budgets
from ddtree_core.reference.decode import SamplingConfig, SpecConfig, generate
from ddtree_core.reference.dflash import DFlashDraftModel, DFlashProposer, DraftHead
from ddtree_core.reference.loading import random_target, resolve_draft_dtype
from ddtree_core.settings import TreeSettings

VOCAB = 8
BLOCK = 6
PROMPT = [1, 2, 3, 4, 5]
NEW_TOKENS = 40


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run ~10x faster on one thread than on two contended ones."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def drafter_for(target, seed=0, block_size=BLOCK):
    return DFlashDraftModel.random(
        seed=seed,
        init_std=0.3,
        hidden_size=target.config.hidden_size,
        num_target_layers=target.config.num_hidden_layers,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        block_size=block_size,
        mask_token_id=VOCAB - 1,
        vocab_size=VOCAB,
    )


@functools.cache
def models_for(arch):
    """(target, drafter, the target's greedy tokens) for a tiny random target of `arch`."""
    target = random_target(arch, vocab_size=VOCAB)
    greedy = generate(target, PROMPT, SamplingConfig(max_new_tokens=NEW_TOKENS), SpecConfig(method="ar")).tokens
    return target, drafter_for(target), greedy


@pytest.fixture(params=["qwen3", "llama"])
def models(request):
    return models_for(request.param)


def run(target, drafter, spec, sampling=None, **kwargs):
    proposer = None if spec.method == "ar" else DFlashProposer(drafter, target, spec.block_size)
    sampling = sampling or SamplingConfig(max_new_tokens=NEW_TOKENS)
    return generate(target, PROMPT, sampling, spec, proposer=proposer, **kwargs)


def assert_same_tokens(target, expected, got):
    """Fail with the first divergence and the target's logit margin there."""
    divergence = metrics.first_divergence(expected, got)
    if divergence is None:
        return
    with torch.no_grad():
        ids = torch.tensor([PROMPT + list(expected[: divergence.index])], device=target.device)
        logits = target(ids).logits[0, -1]
    margin = metrics.logit_margin(logits, divergence)
    pytest.fail(f"outputs diverge: {divergence}; target logits there: {margin}")


def uses_compaction(generation):
    """Some round accepted a path that is not the first nodes in order (KV entries had to move)."""
    return any(trace.accepted != tuple(range(len(trace.accepted))) for trace in generation.trace)


GRID = [("qwen3", budget, depth) for budget in (1, 2, 3, 5, 8, 13, 16, 31, 32, 64) for depth in (1, 3, None)]
GRID += [("llama", budget, None) for budget in (1, 8, 64)]


@pytest.mark.parametrize("arch, budget, max_depth", GRID, ids=[f"{a}-b{b}-d{d}" for a, b, d in GRID])
def test_ddtree_greedy_equals_ar(arch, budget, max_depth):
    target, drafter, ar_tokens = models_for(arch)
    spec = SpecConfig(method="ddtree", tree=TreeSettings(budget, max_depth, 3.0))
    generation = run(target, drafter, spec, trace=True)
    assert_same_tokens(target, ar_tokens, generation.tokens)
    assert all(stats.num_nodes <= budget for stats in generation.rounds)
    assert all(stats.depth_reached <= (max_depth or BLOCK - 1) for stats in generation.rounds)


def test_ddtree_greedy_paths_need_compaction(models):
    """The parity above covers accepted paths that are not contiguous in the verify order."""
    target, drafter, ar_tokens = models
    generation = run(target, drafter, SpecConfig(method="ddtree", tree=TreeSettings(64, None, 3.0)), trace=True)
    assert_same_tokens(target, ar_tokens, generation.tokens)
    assert uses_compaction(generation)
    assert max(generation.accept_lengths) >= 3


@pytest.mark.parametrize("budget", [0, 1, 64])
def test_ddtree_reference_and_torch_impls_agree(models, budget):
    target, drafter, _ = models
    ref = run(target, drafter, SpecConfig(method="ddtree", tree=TreeSettings(budget, None, 3.0)))
    fast = run(target, drafter, SpecConfig(method="ddtree", tree=TreeSettings(budget, None, 3.0), tree_impl="torch"))
    assert ref.tokens == fast.tokens
    assert ref.accept_lengths == fast.accept_lengths
    assert [r.ranks for r in ref.rounds] == [r.ranks for r in fast.rounds]


HELD_GRID = [(budget, depth) for budget in (1, 3, 8, 64) for depth in (3, None)]


@pytest.mark.parametrize("budget, max_depth", HELD_GRID, ids=[f"b{b}-d{d}" for b, d in HELD_GRID])
def test_held_ddtree_greedy_equals_ar_and_holds_the_chain(budget, max_depth):
    """Lossless with hold_chain, and every round's first min(budget, depth) nodes are the chain."""
    target, drafter, ar_tokens = models_for("qwen3")
    spec = SpecConfig(method="ddtree", tree=TreeSettings(budget, max_depth, 3.0, hold_chain=True))
    generation = run(target, drafter, spec, trace=True)
    assert_same_tokens(target, ar_tokens, generation.tokens)
    chain = min(budget, max_depth or BLOCK - 1)
    for trace in generation.trace:
        assert trace.parents[: chain + 1] == (-1, *range(chain))
        assert trace.depths[: chain + 1] == tuple(range(chain + 1))


def test_unheld_trees_leave_the_chain_out():
    """The held runs above differ from plain DDTree: at budget 8 some best-first tree is no full chain."""
    target, drafter, _ = models_for("qwen3")
    generation = run(target, drafter, SpecConfig(method="ddtree", tree=TreeSettings(8, None, 3.0)), trace=True)
    chain = BLOCK - 1
    assert any(trace.parents[: chain + 1] != (-1, *range(chain)) for trace in generation.trace)


def test_held_tree_at_budget_depth_is_the_dflash_chain(models):
    """budget = depth: the held tree is DFlash's block, so rounds, trees and acceptance equal DFlash's."""
    target, drafter, ar_tokens = models
    held = SpecConfig(method="ddtree", tree=TreeSettings(BLOCK - 1, None, 3.0, hold_chain=True))
    tree = run(target, drafter, held, trace=True)
    chain = run(target, drafter, SpecConfig(method="dflash"), trace=True)
    assert_same_tokens(target, ar_tokens, tree.tokens)
    assert tree.accept_lengths == chain.accept_lengths
    assert tree.trace == chain.trace


@pytest.mark.parametrize("budget", [1, 8])
def test_held_reference_and_torch_impls_agree(models, budget):
    target, drafter, _ = models
    spec = SpecConfig(method="ddtree", tree=TreeSettings(budget, 4, 3.0, hold_chain=True))
    ref = run(target, drafter, spec, trace=True)
    fast = run(target, drafter, dataclasses.replace(spec, tree_impl="torch"), trace=True)
    assert ref.tokens == fast.tokens and ref.trace == fast.trace


def test_spec_knobs_are_checked_tree_settings():
    with pytest.raises(ValueError, match="hold_chain must be a bool"):
        SpecConfig(method="ddtree", tree=TreeSettings(64, None, hold_chain=1))
    with pytest.raises(ValueError, match="tree must be a TreeSettings"):
        SpecConfig(method="ddtree", tree={"budget": 64})


@pytest.mark.parametrize("block_size", [2, 4, BLOCK])
def test_dflash_greedy_equals_ar(models, block_size):
    target, drafter, ar_tokens = models
    generation = run(target, drafter, SpecConfig(method="dflash", block_size=block_size))
    assert_same_tokens(target, ar_tokens, generation.tokens)
    assert all(stats.num_nodes == block_size - 1 for stats in generation.rounds)


class GreedyOracle:
    """A proposer that drafts the target's own greedy continuation: every draft token is right."""

    layer_ids = (0,)

    def __init__(self, target, block_size):
        self.target, self.block_size = target, block_size

    def add_context(self, features):
        pass

    def propose(self, tokens):
        ids, drafted = list(tokens), []
        for _ in range(self.block_size - 1):
            ids.append(int(self.target(torch.tensor([ids])).logits[0, -1].argmax()))
            drafted.append(ids[-1])
        return 20.0 * torch.nn.functional.one_hot(torch.tensor([drafted]), VOCAB).float()


@pytest.mark.parametrize(
    "spec, accept_len",
    [
        (SpecConfig(method="dflash", block_size=4), 4),
        (SpecConfig(method="ddtree", tree=TreeSettings(64, None), block_size=BLOCK), BLOCK),
        (SpecConfig(method="ddtree", tree=TreeSettings(64, 2), block_size=BLOCK), 3),
        (SpecConfig(method="ddtree", tree=TreeSettings(3, None), block_size=BLOCK), 4),
    ],
    ids=["dflash_b4", "ddtree_b64", "ddtree_depth2", "ddtree_budget3"],
)
def test_perfect_proposer_accepts_whole_paths(models, spec, accept_len):
    target, _, ar_tokens = models
    proposer = GreedyOracle(target, spec.block_size)
    sampling = SamplingConfig(max_new_tokens=NEW_TOKENS)
    generation = generate(target, PROMPT, sampling, spec, proposer=proposer)
    assert_same_tokens(target, ar_tokens, generation.tokens)
    assert generation.accept_lengths[:-1] == (accept_len,) * (len(generation.rounds) - 1)
    assert all(set(stats.ranks) == {0} for stats in generation.rounds[:-1])


@pytest.mark.parametrize("method", ["ar", "dflash", "ddtree"])
def test_stop_token_ends_the_response(models, method):
    target, drafter, ar_tokens = models
    stop = ar_tokens[10]
    end = ar_tokens.index(stop) + 1
    sampling = SamplingConfig(max_new_tokens=NEW_TOKENS, stop_token_ids=(stop,))
    generation = run(target, drafter, SpecConfig(method=method), sampling)
    assert generation.tokens == ar_tokens[:end]
    assert (generation.finish_reason, generation.matched) == ("stop", stop)


@pytest.mark.parametrize("method", ["ar", "dflash", "ddtree"])
@pytest.mark.parametrize("max_new_tokens", [1, 2, 7])
def test_length_ends_the_response(models, method, max_new_tokens):
    target, drafter, ar_tokens = models
    generation = run(target, drafter, SpecConfig(method=method), SamplingConfig(max_new_tokens=max_new_tokens))
    assert generation.tokens == ar_tokens[:max_new_tokens]
    assert (generation.finish_reason, generation.matched) == ("length", None)


def test_stop_check_ends_the_response(models):
    target, drafter, ar_tokens = models
    check = lambda tokens: "seen" if len(tokens) >= 5 else None
    generation = run(target, drafter, SpecConfig(method="ddtree"), stop_check=check)
    assert generation.tokens == ar_tokens[:5]
    assert (generation.finish_reason, generation.matched) == ("stop", "seen")


def test_round_records_and_trace_agree(models):
    target, drafter, _ = models
    spec = SpecConfig(method="ddtree", tree=TreeSettings(16, None, 3.0))
    generation = run(target, drafter, spec, timing=True, trace=True)
    assert len(generation.trace) == len(generation.rounds)
    position = 1  # the prefill token comes first
    for stats, trace in zip(generation.rounds, generation.trace):
        assert stats.num_nodes == len(trace.token_ids) and stats.depth_reached == max(trace.depths)
        path = trace.accepted
        assert path[0] == 0 and len(path) == stats.accept_len
        assert all(trace.parents[child] == parent for parent, child in zip(path, path[1:]))
        accepted_tokens = [trace.token_ids[node - 1] for node in path[1:]]
        emitted = list(generation.tokens[position : position + len(accepted_tokens)])
        assert emitted == accepted_tokens[: len(emitted)]  # the last round may be cut at max_new_tokens
        position += stats.accept_len
    assert position >= generation.num_tokens
    times = generation.stage_times
    assert times.verify > 0 and times.draft > 0 and times.tree_build > 0 and times.draft_prefill > 0
    assert run(target, drafter, spec).stage_times is None


def target_joint(target, sampling):
    """P(first token, second token) of the target alone under `sampling`, [V, V]."""
    with torch.no_grad():
        first = verify.target_probs(target(torch.tensor([PROMPT])).logits[0, -1], **sampling)
        rows = [
            verify.target_probs(target(torch.tensor([PROMPT + [t]])).logits[0, -1], **sampling) for t in range(VOCAB)
        ]
    return first.unsqueeze(1) * torch.stack(rows)


def chi_square_p_value(counts, probs):
    """Pearson's test; cells with expected count < 5 are pooled into one."""
    total = sum(counts.values())
    expected = {cell: total * p for cell, p in probs.items() if p > 0}
    assert set(counts) <= set(expected), f"impossible outcomes sampled: {set(counts) - set(expected)}"
    big = [cell for cell, e in expected.items() if e >= 5]
    pooled_e = sum(e for cell, e in expected.items() if cell not in big)
    pooled_o = sum(n for cell, n in counts.items() if cell not in big)
    stat = sum((counts.get(cell, 0) - expected[cell]) ** 2 / expected[cell] for cell in big)
    cells = len(big)
    if pooled_e > 0:
        stat += (pooled_o - pooled_e) ** 2 / pooled_e
        cells += 1
    df = cells - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2.0), torch.tensor(stat / 2.0))), stat, df


@pytest.mark.parametrize(
    "spec",
    [
        SpecConfig(method="ddtree", tree=TreeSettings(2, None)),
        SpecConfig(method="ddtree", tree=TreeSettings(8, None, 3.0)),
        SpecConfig(method="dflash"),
        SpecConfig(method="ar"),
    ],
    ids=["ddtree_b2", "ddtree_b8", "dflash", "ar"],
)
def test_sampled_first_two_tokens_follow_the_target(spec):
    target = random_target("qwen3", vocab_size=VOCAB, init_std=0.08, seed=1)  # a spread joint
    drafter = drafter_for(target)
    knobs = {"temperature": 0.8, "top_p": 0.95, "top_k": 4}
    probs = target_joint(target, knobs)
    counts = collections.Counter()
    for seed in range(300):
        sampling = SamplingConfig(max_new_tokens=2, seed=seed, **knobs)
        counts[run(target, drafter, spec, sampling).tokens] += 1
    cells = {(a, b): float(probs[a, b]) for a in range(VOCAB) for b in range(VOCAB)}
    p_value, stat, df = chi_square_p_value(counts, cells)
    assert p_value > 1e-3, f"chi2 {stat:.1f} on {df} df, p = {p_value:.2e}"


def test_sampling_is_reproducible_with_a_seed(models):
    target, drafter, _ = models
    sampling = SamplingConfig(max_new_tokens=12, temperature=1.0, seed=7)
    first = run(target, drafter, SpecConfig(method="ddtree", tree=TreeSettings(8, None)), sampling)
    again = run(target, drafter, SpecConfig(method="ddtree", tree=TreeSettings(8, None)), sampling)
    assert first.tokens == again.tokens


@pytest.mark.parametrize("method", ["dflash", "ddtree"])
def test_bfloat16_runs(method):
    target = random_target("qwen3", vocab_size=VOCAB).to(torch.bfloat16)
    drafter = drafter_for(target).to(torch.bfloat16)
    generation = run(target, drafter, SpecConfig(method=method, tree=TreeSettings(16, None)), timing=True)
    assert generation.num_tokens == NEW_TOKENS and all(0 <= t < VOCAB for t in generation.tokens)
    assert math.isfinite(generation.time_per_output_token) and generation.stage_times.verify > 0


@pytest.mark.parametrize("method", ["dflash", "ddtree"])
def test_bfloat16_drafter_beside_a_float32_target_is_lossless(models, method):
    """The drafter's dtype only moves acceptance: the float32 target's greedy tokens come out unchanged, and
    the proposer hands the walk float32 logits from its bfloat16 copy of the head."""
    target, drafter, ar_tokens = models
    low = drafter_for(target).to(torch.bfloat16)
    generation = run(target, low, SpecConfig(method=method, tree=TreeSettings(16, None, 3.0)))
    assert_same_tokens(target, ar_tokens, generation.tokens)
    proposer = DFlashProposer(low, target)
    with torch.no_grad():
        proposer.add_context(torch.zeros(1, len(PROMPT) - 1, len(low.target_layer_ids) * target.config.hidden_size))
        logits = proposer.propose(PROMPT)
    head = target.get_output_embeddings().weight
    assert logits.dtype == torch.float32 and proposer._head.weight.dtype == torch.bfloat16
    assert head.dtype == torch.float32  # the target's own head is untouched


@pytest.mark.parametrize(
    "cost, sizes",
    [
        (CostTable((1, 65), (1.0, 1.0)), {64}),  # verifying more costs nothing: the largest tree every round
        (CostTable((1, 2, 65), (1.0, 1.0, 1e6)), {1}),  # beyond 2 tokens it costs ages: one node a round
    ],
    ids=["flat", "steep"],
)
def test_auto_budget_is_lossless_and_follows_the_cost(models, cost, sizes):
    """budget=auto: every round takes the budget the cost favours, and the output stays the target's."""
    target, drafter, ar_tokens = models
    auto = AutoBudget(cost, auto_budgets(64))
    spec = SpecConfig(method="ddtree", tree=TreeSettings(64, None, 3.0))
    generation = run(target, drafter, spec, auto=auto)
    assert_same_tokens(target, ar_tokens, generation.tokens)
    assert {stats.num_nodes for stats in generation.rounds} == sizes
    assert auto.seen == len(generation.rounds) - 1 and auto.overhead_ms > 0 and 0.05 <= auto.calibration <= 2


def test_draft_dtype_names(monkeypatch):
    """same: the target's; auto: bfloat16 only beside a float32 target on a CPU with native bfloat16."""
    cpu, f32, bf16 = torch.device("cpu"), torch.float32, torch.bfloat16
    assert resolve_draft_dtype("same", cpu, f32) == f32 and resolve_draft_dtype("float16", cpu, f32) == torch.float16
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert resolve_draft_dtype("auto", cpu, f32) == bf16 and resolve_draft_dtype("auto", cpu, bf16) == bf16
    assert resolve_draft_dtype("auto", torch.device("cuda"), f32) == f32
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert resolve_draft_dtype("auto", cpu, f32) == f32
    with pytest.raises(ValueError, match="dtype must be auto or one of"):
        resolve_draft_dtype("int8", cpu, f32)


def test_dflash_and_ddtree_need_a_proposer():
    target, drafter, _ = models_for("qwen3")
    with pytest.raises(ValueError, match="proposer"):
        generate(target, PROMPT, SamplingConfig(), SpecConfig(method="ddtree"))
    with pytest.raises(ValueError, match="max_depth"):
        run(target, drafter, SpecConfig(method="ddtree", tree=TreeSettings(64, BLOCK)))


CUDA_SPECS = [
    SpecConfig(method="dflash"),
    SpecConfig(method="ddtree", tree=TreeSettings(16, None, 3.0)),
    SpecConfig(method="ddtree", tree=TreeSettings(64, 3, 3.0), tree_impl="torch"),
]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("spec", CUDA_SPECS, ids=["dflash", "ddtree_ref", "ddtree_torch"])
def test_cuda_greedy_equals_ar(spec):
    target = random_target("qwen3", vocab_size=VOCAB).cuda()
    drafter = drafter_for(target).cuda()
    ar = run(target, drafter, SpecConfig(method="ar"))
    generation = run(target, drafter, spec, timing=True)
    assert_same_tokens(target, ar.tokens, generation.tokens)
    assert generation.stage_times.verify > 0 and generation.decode_time > 0
    half = run(target.bfloat16(), drafter.bfloat16(), spec)
    assert half.num_tokens == NEW_TOKENS and all(0 <= t < VOCAB for t in half.tokens)


def test_measure_verify_cost_times_every_width(models):
    """One positive median per asked width, sorted; bad widths refused."""
    from ddtree_core.reference.cost import measure_verify_cost

    target = models[0]
    cost = measure_verify_cost(target, (5, 1, 2), context=4, repeats=2)
    assert cost.tokens == (1, 2, 5) and all(ms > 0 for ms in cost.ms)
    with pytest.raises(ValueError, match="need widths >= 1"):
        measure_verify_cost(target, (0,))


def test_a_cost_table_is_used_only_for_the_target_it_was_measured_for(models, tmp_path):
    """load_cost_table: the table back where the identity matches and it reaches the widest verify; else None and
    one line naming the field (threads, dtype), the width, or the unreadable file."""
    from ddtree_core.reference.cost import cost_identity, load_cost_table

    target = models[0]
    path = tmp_path / "cost.json"
    CostTable((1, 5, 9), (2.0, 3.0, 4.0)).to_json(path, **cost_identity(target), context=4)
    table, why = load_cost_table(path, target, (1, 5, 9))
    assert why is None and table.tokens == (1, 5, 9) and table.ms == (2.0, 3.0, 4.0)
    assert load_cost_table(path, target, (1, 17))[1] == f"{path} reaches 9 tokens, the widest verify here is 17"
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        why = load_cost_table(path, target, (1, 5))[1]
    finally:
        torch.set_num_threads(threads)
    assert why == f"{path} was measured for threads {threads}, this process has {threads + 1}"
    half = copy.deepcopy(target).bfloat16()  # the fixture's target stays float32
    assert "measured for dtype float32, this process has bfloat16" in load_cost_table(path, half, (1,))[1]
    for content in ("not json", '{"tokens": [1], "ms": [0]}'):
        path.write_text(content)
        why = load_cost_table(path, target, (1,))[1]
        assert why.startswith(f"{path} is not a cost table (") and "\n" not in why
    assert "is not a cost table (FileNotFoundError" in load_cost_table(tmp_path / "none.json", target, (1,))[1]


@pytest.mark.parametrize("method", ["dflash", "ddtree"])
def test_a_draft_vocabulary_stays_lossless_and_drafts_only_its_tokens(models, method):
    """A drafter limited to token ids 0..3 and 6 (of 8): greedy output is the target's; every drafted node's
    token is one of those (the rows of its logits are mapped back to token ids)."""
    target, drafter, greedy = models
    head = DraftHead(target, drafter.dtype, draft_vocab=4, keep=(6,))
    spec = SpecConfig(method=method, tree=TreeSettings(6, None))
    out = generate(target, PROMPT, SamplingConfig(max_new_tokens=NEW_TOKENS), spec,
                   proposer=DFlashProposer(drafter, target, head=head), trace=True)  # fmt: skip
    assert_same_tokens(target, greedy, out.tokens)
    drafted = {t for record in out.trace for t in record.token_ids}
    assert drafted and drafted <= {0, 1, 2, 3, 6}
