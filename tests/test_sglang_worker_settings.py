"""The DDTree worker against SGLang's DFlashWorkerV2: the overrides' parameters, construction before the KV
pool exists, request settings parsed once per request, one decode round with the model calls stubbed
(needs SGLang)."""

import inspect
from types import SimpleNamespace

import pytest

pytest.importorskip("sglang.srt.speculative.dflash_worker_v2")

from ddtree_core.settings import TreeSettings  # noqa: E402
from ddtree_core.sglang.config import ServerSettings, admit  # noqa: E402
from ddtree_core.sglang.worker import DDTreeWorker  # noqa: E402


def test_overrides_take_sglangs_parameters():
    """SGLang calls the worker's methods with DFlashWorkerV2's parameters (the scheduler builds it with keyword
    arguments): each method DDTreeWorker overrides takes the same ones, in the same order."""
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    differ = {}
    for name, ours in vars(DDTreeWorker).items():
        theirs = getattr(DFlashWorkerV2, name, None)
        if inspect.isfunction(ours) and inspect.isfunction(theirs):
            if list(inspect.signature(ours).parameters) != list(inspect.signature(theirs).parameters):
                differ[name] = str(inspect.signature(theirs))
    assert differ == {}, f"DFlashWorkerV2's signatures differ: {differ}"


def test_request_settings_are_parsed_once_per_request(monkeypatch):
    server = ServerSettings(block_size=16, tree=TreeSettings(64, 15, 1.0))
    worker = SimpleNamespace(settings=server, _warned_request_settings=False)
    reqs = [SimpleNamespace(sampling_params=SimpleNamespace(custom_params=params))
            for params in ({"ddtree_budget": 8}, None, {"ddtree_budget": 1000})]  # fmt: skip
    first = DDTreeWorker._request_settings(worker, reqs)
    assert first == [TreeSettings(8, 15, 1.0), server.request_defaults(), server.request_defaults()]
    assert worker._warned_request_settings  # the out-of-range budget ran with the defaults, with a warning
    calls = []
    monkeypatch.setattr(TreeSettings, "from_custom_params", classmethod(lambda cls, *a, **k: calls.append(a)))
    assert DDTreeWorker._request_settings(worker, reqs) == first and calls == []


def test_request_settings_parsed_at_admission_are_not_parsed_again(monkeypatch):
    server = ServerSettings(block_size=16, tree=TreeSettings(64, 15))
    worker = SimpleNamespace(settings=server, _warned_request_settings=False)
    req = SimpleNamespace(sampling_params=SimpleNamespace(custom_params={"ddtree_budget": 8}))
    assert admit(req, server) is None
    calls = []
    monkeypatch.setattr(TreeSettings, "from_custom_params", classmethod(lambda cls, *a, **k: calls.append(a)))
    assert DDTreeWorker._request_settings(worker, [req]) == [TreeSettings(8, 15)] and calls == []


def test_worker_builds_before_the_kv_pool_exists(monkeypatch):
    """SGLang builds the draft worker while the target's token_to_kv_pool_allocator is still None: the
    worker must not touch the pool before its first round (an H200 run died at startup on exactly that).
    The parent, which builds the draft runner, gets DFlashWorkerV2's arguments and the drafter's block as
    its width (0.5.15: in its server args; later releases: in the spec bag around it)."""
    import contextlib

    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    from ddtree_core.sglang import compat
    from ddtree_core.sglang import worker as worker_module

    server = ServerSettings(block_size=16, tree=TreeSettings(63, 15, 1.0))  # W = 64
    model = SimpleNamespace(logits_processor=object(), lm_head=object())
    runner = SimpleNamespace(
        model=model, token_to_kv_pool_allocator=None, mambaish_config=None, is_hybrid_swa=False,
        model_config=SimpleNamespace(vocab_size=1000),
    )  # fmt: skip
    target = SimpleNamespace(model_runner=runner)
    parameters = list(inspect.signature(DFlashWorkerV2.__init__).parameters)[1:]
    arguments = {name: index for index, name in enumerate(parameters)} | {"target_worker": target}
    arguments["server_args"] = SimpleNamespace(speculative_dflash_block_size=16, speculative_num_draft_tokens=64)
    scoped, parent_calls = [], []

    @contextlib.contextmanager
    def draft_width(block):
        scoped.append(block)
        yield
        scoped.append("exit")

    def parent_init(self, *args):
        parent_calls.append((dict(zip(parameters, args)), list(scoped)))
        self.device, self.tp_rank, self._target_tp_rank = "cpu", arguments.get("tp_rank", 0), 0
        self._target_worker, self.model_runner = target, runner

    monkeypatch.setattr(DFlashWorkerV2, "__init__", parent_init)
    monkeypatch.setattr(worker_module, "settings_of", lambda args: server)
    monkeypatch.setattr(compat, "draft_width", draft_width)
    built = DDTreeWorker(**arguments)
    assert built.settings == server and built._kv_mover is None
    [(passed, scopes)] = parent_calls
    assert scopes == [16] and scoped == [16, "exit"]  # the parent ran inside the block-width scope
    assert {name: passed[name] for name in parameters if name != "server_args"} == {
        name: arguments[name] for name in parameters if name != "server_args"
    }
    width = passed["server_args"].speculative_num_draft_tokens
    assert width == (16 if compat.worker_api() == "legacy" else 64)  # 0.5.15: the draft copy of the args


@pytest.mark.parametrize("auto", [False, True], ids=["fixed", "auto"])
def test_decode_round_wires_the_round_functions(monkeypatch, auto):
    """One decode round on the CPU with SGLang's model calls stubbed: the block, KV slots, tree, verify
    inputs, walk, KV move and draft-KV commit reach each other as the torch composition says they should.
    auto: budgets (3, 5) of a block of 4, and a policy that has seen nothing, so the round takes budget 3: the tree
    built at 5 is cut to 3 nodes, and the round verifies and commits at width 4 with the width-4 verify state."""
    import torch

    from ddtree_core.policy import CostTable, LaggedAuto
    from ddtree_core.sglang import auto as auto_module
    from ddtree_core.sglang import rounds
    from ddtree_core.sglang.profile import StageTimer

    server = ServerSettings(block_size=4, tree=TreeSettings(5, 3, 1.0), auto_budgets=(3, 5) if auto else ())
    policy = LaggedAuto(CostTable((1,), (1.0,)), (3, 5), 4) if auto else None
    budget = 3 if auto else 5
    bs, vocab, hidden, width = 2, 40, 8, max(budget + 1, server.block_size)  # W = 6 (auto: 4), D = 3
    generator = torch.Generator().manual_seed(0)
    draft_logits = torch.randn(bs, server.tree_depth, vocab, generator=generator) * 3
    verify_logits = torch.randn(bs * width, vocab, generator=generator)
    # The target follows each tree through its last-numbered children, so the path's KV pairs are no identities.
    _, full_tree = rounds.draft_tree(draft_logits, server, None, impl="torch")
    tree = full_tree.prefix(budget)
    for b in range(bs):
        node, parents = 0, tree.parents[b].tolist()
        while children := [c for c, p in enumerate(parents) if p == node]:
            verify_logits[b * width + node, tree.token_ids[b, children[-1] - 1]] += 100.0
            node = children[-1]
    verify_hidden = torch.randn(bs * width, hidden, generator=generator)
    req_to_token = torch.arange(3 * 64, dtype=torch.int32).view(3, 64) * 7 + 1
    seen, moves = {}, []

    def draft_block(batch, draft_input, block_ids, positions, block_loc, plan):
        seen.update(block_ids=block_ids, block_positions=positions, block_loc=block_loc, draft_plan=plan)
        return torch.zeros(bs, server.block_size, hidden), False

    def verify(batch, draft_input, inputs, plan, verify_width):
        seen.update(verify=inputs, out_cache_loc=batch.out_cache_loc, verify_plan=plan, verify_width=verify_width)
        return SimpleNamespace(next_token_logits=verify_logits.clone(), hidden_states=verify_hidden), True

    def append(**kwargs):
        seen.update(append=kwargs)

    pool = SimpleNamespace(move_kv_cache=lambda dst, src: moves.append((dst, src)))
    try:  # SGLang's KV id translator where it has one (0.5.23), over a plain pool: ids are not translated
        from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
    except ImportError:
        translator = None
    else:
        translator = KVIndexTranslator(
            req_to_token=req_to_token, token_to_kv_pool_allocator=None, token_to_kv_pool=None, page_size=1, device="cpu"
        )
    runner_of = SimpleNamespace(kv_index_translator=translator)
    fake = SimpleNamespace(
        settings=server, _timer=StageTimer(0, "cpu"), _draft_head=None, block_size=server.block_size,
        _mask_token_id=39, device="cpu", _tail_impl="torch", _kv_mover=None, tp_rank=0, _target_tp_rank=0,
        _warned_request_settings=False, _auto=policy, _verify_states={}, _auto_timed=True, _last_round=None,
        model_runner=SimpleNamespace(
            req_to_token_pool=SimpleNamespace(req_to_token=req_to_token),
            token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: pool), kv_index_translator=translator,
        ),
        target_worker=SimpleNamespace(model_runner=runner_of), draft_model_runner=runner_of,
        _draft_block=draft_block, _draft_logits=lambda h: draft_logits, _verify=verify,
        _append_target_hidden_to_draft_kv_by_loc=append,
        _make_next_draft_input_decode=lambda **kwargs: kwargs,
    )  # fmt: skip
    for name in (
        "_request_settings",
        "_round_plan",
        "_target_tokens",
        "_move_path_kv",
        "_commit_draft_kv",
        "_auto_budget",
    ):
        setattr(fake, name, getattr(DDTreeWorker, name).__get__(fake))
    reqs = [SimpleNamespace(sampling_params=SimpleNamespace(custom_params=None)) for _ in range(bs)]
    prefix, pools, bonus = torch.tensor([5, 11]), torch.tensor([2, 0]), torch.tensor([17, 23])
    batch = SimpleNamespace(
        seq_lens=prefix, req_pool_indices=pools, reqs=reqs, spec_info=SimpleNamespace(bonus_tokens=bonus),
        seq_lens_cpu=prefix.clone(), seq_lens_sum=16, sampling_info=None, out_cache_loc=None,
    )  # fmt: skip
    result = DDTreeWorker._decode_round(fake, batch, None)

    # what the round must have computed, from the same inputs through the torch composition
    slots = torch.stack([req_to_token[p, s : s + width] for p, s in zip(pools.tolist(), prefix.tolist())]).long()
    topk, tree = rounds.draft_tree(draft_logits, server, None, impl="torch")
    if auto:
        expected = auto_module.expected_at(tree, (3, 5))
        tree = tree.prefix(budget)
    verify_inputs = rounds.verify_batch(tree, bonus, prefix, 16, impl="torch")
    target = verify_logits.view(bs, width, vocab).argmax(-1)
    walk, path, stats = rounds.round_tail(tree, target, topk, prefix, cache_loc=slots, impl="torch")
    assert bool((path.kv_dst != path.kv_src).any()) and walk.accept_lens.min() >= 2

    assert seen["block_ids"].tolist() == [[17, 39, 39, 39], [23, 39, 39, 39]]
    assert seen["block_positions"].tolist() == [[5, 6, 7, 8], [11, 12, 13, 14]]
    assert torch.equal(seen["block_loc"], slots[:, :4]) and torch.equal(seen["out_cache_loc"], slots.reshape(-1))
    plan = seen["draft_plan"]  # one plan per round: the draft block, the verify and the draft-KV commit
    assert seen["verify_plan"] is plan and (plan is None) == (translator is None)
    if plan is not None:  # the round's write window is its W verify slots per request
        assert torch.equal(plan.write_virtual, slots.reshape(-1)) and plan.read_extent == width
        assert torch.equal(plan.seq_lens, prefix) and torch.equal(plan.seq_lens_cpu, prefix)
    for name in ("tokens", "positions", "custom_mask"):
        assert torch.equal(getattr(seen["verify"], name), getattr(verify_inputs, name)), name
    [(dst, src)] = moves
    assert torch.equal(dst, path.kv_dst.reshape(-1)) and torch.equal(src, path.kv_src.reshape(-1))
    append = seen["append"]
    assert torch.equal(append["cache_loc_2d"], slots[:, :4]) and torch.equal(append["commit_lens"], path.commit_lens)
    assert torch.equal(append["target_hidden"], verify_hidden[path.hidden_rows.reshape(-1)])
    assert torch.equal(append["positions"], path.positions.reshape(-1))
    assert torch.equal(result.next_token_ids, path.out_tokens.reshape(-1))
    assert torch.equal(result.accept_lens, path.commit_lens) and torch.equal(result.ddtree_stats, stats)
    assert torch.equal(result.next_draft_input["bonus_tokens"], walk.bonus)
    assert result.speculative_num_draft_tokens == server.tree_depth + 1
    assert seen["verify_width"] == width and tuple(seen["verify"].tokens.shape) == (bs, width)
    assert result.ddtree_budget == budget
    if auto:
        assert tree.width == 4 and torch.equal(result.ddtree_expected, expected)
        assert fake._last_round[1:] == (bs, 3)  # the next round's interval is timed from this one
        assert result.ddtree_expected.shape == (bs, 2) and bool((result.ddtree_expected[:, 1] >= expected[:, 0]).all())
    else:
        assert result.ddtree_expected is None
