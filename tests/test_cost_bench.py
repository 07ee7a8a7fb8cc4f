"""The verify cost benchmark (ddbench/model/cost_bench.py): its decoder's tree verify against incremental decoding,
the tree mask, the floors, the knee rule and the smoke run's files. All on a CPU in float32."""

import csv
import json
from types import SimpleNamespace

import pytest
import torch

from ddbench.model import cost_bench

COLUMNS = [
    "batch", "nodes", "width", "prefix", "time_ms", "body_ms", "measured_ms", "tokens_per_s", "weight_gb", "kv_gb",
    "bytes_floor_ms", "flops_floor_ms", "floor_ms", "bound", "over_floor", "copy_floor_ms", "memory_gb", "graph",
    "knee", "note",
]  # fmt: skip
TINY = cost_bench.PRESETS["tiny"]


@pytest.fixture(scope="module")
def decoder():
    return cost_bench.Decoder(TINY, TINY.layers, torch.float32, "cpu", seed=0)


def prefilled_cache(decoder, batch, prefix, length, generator):
    """A cache of `length` slots whose first `prefix` hold a causal prefill of random tokens."""
    cache = decoder.new_cache(batch, length)
    tokens = torch.randint(0, TINY.vocab, (batch, prefix), generator=generator)
    positions = torch.arange(prefix).expand(batch, prefix)
    causal = torch.ones(prefix, prefix, dtype=torch.bool).tril().expand(batch, prefix, prefix)
    decoder(tokens, positions, causal, cache, 0)
    return cache


def decode_path(decoder, cache, tokens, prefix):
    """Logits of `tokens` [B, L] fed one at a time after `prefix` cached tokens, [B, L, vocab]."""
    batch, length = tokens.shape
    outputs = []
    for step in range(length):
        visible = torch.ones(batch, 1, prefix + step + 1, dtype=torch.bool)
        position = torch.full((batch, 1), prefix + step)
        outputs.append(decoder(tokens[:, step : step + 1], position, visible, cache, prefix + step))
    return torch.cat(outputs, dim=1)


def test_chain_verify_equals_incremental_decode(decoder):
    batch, prefix, width = 2, 5, 4
    generator = torch.Generator().manual_seed(1)
    cache = prefilled_cache(decoder, batch, prefix, prefix + width, generator)
    incremental_cache = cache.clone()
    tokens = torch.randint(0, TINY.vocab, (batch, width), generator=generator)
    chain = cost_bench.tree_from_parents(torch.tensor([[-1, 0, 1, 2]] * batch))
    positions = prefix + chain.depths
    verified = decoder(tokens, positions, cost_bench.verify_mask(chain, prefix), cache, prefix)
    expected = decode_path(decoder, incremental_cache, tokens, prefix)
    torch.testing.assert_close(verified, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cache, incremental_cache, rtol=1e-5, atol=1e-5)  # the same K/V in the same slots


def test_tree_verify_equals_decoding_each_root_to_node_path(decoder):
    # root ─┬─ 1 ─┬─ 2        each node's logits = decoding its root-to-node path after the prefix
    #       │     └─ 3
    #       └─ 4
    prefix, parents = 3, [-1, 0, 1, 1, 0]
    generator = torch.Generator().manual_seed(2)
    cache = prefilled_cache(decoder, 1, prefix, prefix + len(parents), generator)
    tokens = torch.randint(0, TINY.vocab, (1, len(parents)), generator=generator)
    tree = cost_bench.tree_from_parents(torch.tensor([parents]))
    verified = decoder(tokens, prefix + tree.depths, cost_bench.verify_mask(tree, prefix), cache.clone(), prefix)
    for node, path in enumerate([[0], [0, 1], [0, 1, 2], [0, 1, 3], [0, 4]]):
        expected = decode_path(decoder, cache.clone(), tokens[:, path], prefix)[:, -1]
        torch.testing.assert_close(verified[:, node], expected, rtol=1e-5, atol=1e-5, msg=f"node {node}")


def test_decoder_matches_transformers_qwen3():
    """The architecture itself (rotary into the cache, GQA head mapping, q/k norms, SwiGLU): the same weights
    in transformers' Qwen3ForCausalLM give the same logits."""
    transformers = pytest.importorskip("transformers")
    ours = cost_bench.Decoder(TINY, TINY.layers, torch.float32, "cpu", seed=3)
    generator = torch.Generator().manual_seed(3)
    for name, param in ours.named_parameters():
        if name.endswith("norm.weight"):  # not all ones, so that a swapped norm shows
            param.copy_(1 + 0.5 * torch.randn(param.shape, generator=generator))
    config = transformers.Qwen3Config(
        vocab_size=TINY.vocab, hidden_size=TINY.hidden, intermediate_size=TINY.intermediate,
        num_hidden_layers=TINY.layers, num_attention_heads=TINY.q_heads, num_key_value_heads=TINY.kv_heads,
        head_dim=TINY.head_dim, rope_theta=TINY.rope_theta, rms_norm_eps=TINY.norm_eps, tie_word_embeddings=False,
    )  # fmt: skip
    theirs = transformers.Qwen3ForCausalLM(config).eval()
    names = {"q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
             "o_proj": "self_attn.o_proj", "q_norm.weight": "self_attn.q_norm.weight",
             "k_norm.weight": "self_attn.k_norm.weight", "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
             "down_proj": "mlp.down_proj", "input_norm.weight": "input_layernorm.weight",
             "post_norm.weight": "post_attention_layernorm.weight"}  # fmt: skip
    state = {"model.embed_tokens.weight": ours.embed, "model.norm.weight": ours.norm.weight}
    state["lm_head.weight"] = ours.lm_head
    for i, layer in enumerate(ours.layers):
        for name, param in layer.named_parameters():
            target = names[name]
            state[f"model.layers.{i}.{target}" + ("" if target.endswith(".weight") else ".weight")] = param
    theirs.load_state_dict(state, strict=True)
    batch, length = 2, 7
    tokens = torch.randint(0, TINY.vocab, (batch, length), generator=generator)
    causal = torch.ones(length, length, dtype=torch.bool).tril().expand(batch, length, length)
    logits = ours(tokens, torch.arange(length).expand(batch, length), causal, ours.new_cache(batch, length), 0)
    with torch.no_grad():
        expected = theirs(tokens).logits
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)


def test_verify_mask_of_a_hand_drawn_tree():
    # root ─┬─ a ─┬─ c        nodes 0=root 1=a 2=c 3=d 4=b, after 2 prefix tokens
    #       │     └─ d
    #       └─ b
    tree = cost_bench.tree_from_parents(torch.tensor([[-1, 0, 1, 1, 0]]))
    expected = torch.tensor(
        [
            [1, 1, 1, 0, 0, 0, 0],
            [1, 1, 1, 1, 0, 0, 0],
            [1, 1, 1, 1, 1, 0, 0],
            [1, 1, 1, 1, 0, 1, 0],
            [1, 1, 1, 0, 0, 0, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(cost_bench.verify_mask(tree, prefix=2)[0], expected)
    assert tree.depths.tolist() == [[0, 1, 2, 2, 1]] and tree.max_depth == 2


def test_random_tree_mask_is_ancestor_only():
    tree = cost_bench.random_tree(3, 40, torch.Generator().manual_seed(0))
    parents = tree.parents.tolist()
    mask = cost_bench.verify_mask(tree, prefix=4)
    assert mask[:, :, :4].all()
    for b in range(3):
        assert parents[b][0] == -1 and all(0 <= parents[b][i] < i for i in range(1, 40))
        for node in range(40):
            chain, ancestor = set(), node
            while ancestor != -1:
                chain.add(ancestor)
                ancestor = parents[b][ancestor]
            assert set(mask[b, node, 4:].nonzero().flatten().tolist()) == chain


def test_tree_from_parents_rejects_a_parent_after_its_child():
    with pytest.raises(ValueError):
        cost_bench.tree_from_parents(torch.tensor([[-1, 2, 0]]))


def test_floors_of_a_literal_case():
    shape = cost_bench.ModelShape(hidden=8, layers=2, q_heads=2, kv_heads=1, head_dim=4, intermediate=16, vocab=32)
    # per layer: q, o 8*8 each + k, v 8*4 each = 192; MLP 3*8*16 = 384 -> 576; x 2 layers + lm_head 32*8 = 1408
    assert shape.matmul_params == 1408
    out = cost_bench.floors(shape, batch=2, width=3, prefix=5, itemsize=2, bandwidth=1e6, flops_per_s=1e7)
    assert out.weight_bytes == 2816  # 1408 * 2
    assert out.kv_bytes == 512  # 2 (k, v) * 2 layers * 2 requests * 1 head * 8 slots * 4 dims * 2 bytes
    assert out.flops == 2 * 1408 * 6 + 3072  # attention: 4 * 2 layers * 2 * 3 tokens * 8 slots * 2 heads * 4 dims
    assert out.bytes_ms == pytest.approx(3.328)  # 3328 bytes / 1e6 bytes/s
    assert out.flops_ms == pytest.approx(1.9968)  # 19968 / 1e7
    assert out.floor_ms == pytest.approx(3.328)


def test_knee_is_the_largest_width_within_ten_percent_of_width_one():
    cell = lambda batch, width, ms: SimpleNamespace(batch=batch, width=width, time_ms=ms)
    results = [
        cell(1, 1, 10.0), cell(1, 16, 10.5), cell(1, 64, 11.0), cell(1, 128, 11.2), cell(1, 256, 20.0),
        cell(4, 16, 12.0), cell(4, 64, 12.1),  # no T = 1 cell: no knee
        cell(8, 1, 30.0), cell(8, 16, None),  # skipped cells do not count
    ]  # fmt: skip
    assert cost_bench.knees(results) == {1: 64, 4: None, 8: 1}


def test_smoke_run_writes_cells_and_run_record(tmp_path):
    config = cost_bench.smoke_config("cpu", seed=0)
    results = cost_bench.run(config, tmp_path, echo=lambda line: None)
    rows = list(csv.DictReader(open(tmp_path / "cells.csv")))
    assert list(rows[0]) == COLUMNS
    assert len(rows) == len(results) == len(config.batches) * len(config.nodes)
    assert [r.note for r in results] == [""] * len(results)
    assert all(r.time_ms > 0 and r.body_ms > 0 and r.floor_ms > 0 and r.width == r.nodes + 1 for r in results)
    assert all(r.time_ms == r.measured_ms for r in results)  # every layer built: nothing scaled
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["config"]["preset"] == "tiny" and record["layers_scaled"] is None
    assert record["knee_rule"] == cost_bench.KNEE_RULE and record["device"] == "cpu"
    assert record["knees"] == {str(b): w for b, w in cost_bench.knees(results).items()}
    for batch in config.batches:
        assert [r.width for r in results if r.batch == batch and r.knee] == [record["knees"][str(batch)]]


def test_fewer_layers_scale_the_time(tmp_path):
    shape = cost_bench.ModelShape(hidden=32, layers=4, q_heads=2, kv_heads=1, head_dim=16, intermediate=64, vocab=64)
    cost_bench.PRESETS["four-layers"] = shape
    try:
        config = cost_bench.BenchConfig("four-layers", 1, (1,), (0,), 4, 1, 0, 1e12, 1e12, "cpu", "float32", 0)
        (result,) = cost_bench.run(config, tmp_path, echo=lambda line: None)
    finally:
        del cost_bench.PRESETS["four-layers"]
    body = result.body_ms / 4  # the one layer timed
    assert result.time_ms == pytest.approx(result.measured_ms + 3 * body)
    assert json.loads((tmp_path / "run.json").read_text())["layers_scaled"].startswith("1 of 4 layers timed")


def test_cli_cost_smoke(tmp_path):
    from typer.testing import CliRunner

    from ddbench.cli import app

    args = ["model", "cost", "--smoke", "--out", str(tmp_path), "--nodes", "0,2", "--reps", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(open(tmp_path / "cells.csv")))
    assert [(row["batch"], row["width"]) for row in rows] == [("1", "1"), ("1", "3"), ("2", "1"), ("2", "3")]
    drawn = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert drawn.exit_code == 0, drawn.output
    assert (tmp_path / "plots" / "cost.png").stat().st_size > 1000
    (tmp_path / "cells.csv").write_text("batch,width\n1,1\n")  # no timed cell: a clear error, exit 2
    broken = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert broken.exit_code == 2 and "not a readable `ddbench model cost` folder" in broken.output
