"""The DFlash drafter: its forward against a from-the-definition implementation, the draft cache,
checkpoint save/load in the z-lab layout, config reading and the target-layer indexing."""

import json

import pytest
import torch
from safetensors.torch import save_file

from ddtree_core.reference.decode import _features
from ddtree_core.reference.dflash import DFlashDraftModel, DFlashProposer, DraftHead, default_target_layer_ids
from ddtree_core.reference.loading import random_target

HIDDEN = 32
FIELDS = dict(
    hidden_size=HIDDEN,
    num_target_layers=6,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=48,
    block_size=4,
    mask_token_id=3,
    vocab_size=16,
)


def drafter(seed=0, **overrides):
    return DFlashDraftModel.random(seed=seed, init_std=0.3, **{**FIELDS, **overrides})


def inputs(model, context=5, seed=1):
    generator = torch.Generator().manual_seed(seed)
    features = len(model.target_layer_ids) * HIDDEN
    block = torch.randn(1, model.block_size, HIDDEN, generator=generator)
    return block, torch.randn(1, context, features, generator=generator)


def rms(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def definition(model, block, context, window=None):
    """The z-lab drafter written out: per head, block queries attend (non-causally) to keys/values of
    [fc-projected context | block], RoPE at positions 0 .. C+L-1, q/k RMSNorm per head, GQA."""
    w, config = model.state_dict(), model.config
    heads, kv_heads, dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    num_context, length = context.shape[1], block.shape[1]
    positions = torch.arange(num_context + length, dtype=torch.float32)
    inv_freq = 1.0 / config.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2).float() / dim)
    angles = torch.cat([positions[:, None] * inv_freq] * 2, dim=-1)
    rope = lambda x, pos: (
        x * angles[pos].cos() + torch.cat([-x[:, dim // 2 :], x[:, : dim // 2]], -1) * angles[pos].sin()
    )
    visible = torch.ones(length, num_context + length, dtype=torch.bool)
    if window is not None:
        visible = (positions[num_context:, None] - positions[None, :]).abs() < window
    ctx = rms(context[0] @ w["fc.weight"].T, w["hidden_norm.weight"])
    h = block[0]
    for i in range(config.num_hidden_layers):
        p = f"layers.{i}."
        x = rms(h, w[p + "input_layernorm.weight"])
        both = torch.cat([ctx, x])
        outs = []
        for head in range(heads):
            group = head // (heads // kv_heads)
            rows, kv_rows = slice(head * dim, (head + 1) * dim), slice(group * dim, (group + 1) * dim)
            q = rope(
                rms(x @ w[p + "self_attn.q_proj.weight"][rows].T, w[p + "self_attn.q_norm.weight"]),
                slice(num_context, None),
            )
            k = rope(
                rms(both @ w[p + "self_attn.k_proj.weight"][kv_rows].T, w[p + "self_attn.k_norm.weight"]),
                slice(None),
            )
            v = both @ w[p + "self_attn.v_proj.weight"][kv_rows].T
            scores = (q @ k.T / dim**0.5).masked_fill(~visible, float("-inf"))
            outs.append(scores.softmax(-1) @ v)
        h = h + torch.cat(outs, -1) @ w[p + "self_attn.o_proj.weight"].T
        x = rms(h, w[p + "post_attention_layernorm.weight"])
        gate, up = x @ w[p + "mlp.gate_proj.weight"].T, x @ w[p + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    return rms(h, w["norm.weight"]).unsqueeze(0)


def test_forward_matches_the_definition():
    model = drafter()
    block, context = inputs(model)
    torch.testing.assert_close(model(block, context, model.new_cache()), definition(model, block, context))


def test_sliding_window_layers_mask_distant_keys():
    model = drafter(num_hidden_layers=1)
    model.layers[0].self_attn.sliding_window = 3
    block, context = inputs(model)
    torch.testing.assert_close(model(block, context, model.new_cache()), definition(model, block, context, window=3))


def test_cached_context_equals_the_whole_context_at_once():
    """Two rounds through the draft cache == one pass over all context (the harness's crop semantics)."""
    model = drafter()
    block, context = inputs(model, context=8)
    cache = model.new_cache()
    model(inputs(model, seed=2)[0], context[:, :5], cache)  # round 1 drafts some other block
    assert cache.length == 5
    second = model(block, context[:, 5:], cache)
    assert cache.length == 8
    torch.testing.assert_close(second, model(block, context, model.new_cache()))


def test_block_attention_is_not_causal():
    model = drafter()
    block, context = inputs(model)
    changed = block.clone()
    changed[0, -1] += 1.0
    before = model(block, context, model.new_cache())[0, 0]
    after = model(changed, context, model.new_cache())[0, 0]
    assert (before - after).abs().max() > 1e-3


def test_save_load_round_trip(tmp_path):
    model = drafter()
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"]
    assert config["dflash_config"] == {"target_layer_ids": [1, 3], "mask_token_id": 3}
    loaded = DFlashDraftModel.from_pretrained(tmp_path)
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))
    assert (loaded.target_layer_ids, loaded.block_size, loaded.mask_token_id) == ((1, 3), 4, 3)
    block, context = inputs(model)
    assert torch.equal(loaded(block, context, loaded.new_cache()), model(block, context, model.new_cache()))


def test_bfloat16_load_keeps_rope_in_float32(tmp_path):
    drafter().save_pretrained(tmp_path)
    loaded = DFlashDraftModel.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert loaded.fc.weight.dtype == torch.bfloat16
    assert loaded.rope.module.inv_freq.dtype == torch.float32
    block, context = inputs(loaded)
    assert loaded(block, context, loaded.new_cache()).dtype == torch.bfloat16


def test_loads_prefixed_sharded_checkpoints(tmp_path):
    model = drafter()
    model.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    weights = {"model." + name: t.contiguous() for name, t in model.state_dict().items()}
    names = sorted(weights)
    save_file({n: weights[n] for n in names[:5]}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({n: weights[n] for n in names[5:]}, str(tmp_path / "model-00002-of-00002.safetensors"))
    loaded = DFlashDraftModel.from_pretrained(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


def test_missing_weights_are_an_error(tmp_path):
    model = drafter()
    model.save_pretrained(tmp_path)
    weights = {n: t.contiguous() for n, t in model.state_dict().items() if n != "fc.weight"}
    save_file(weights, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="fc.weight"):
        DFlashDraftModel.from_pretrained(tmp_path)


def test_checkpoint_names_follow_the_zlab_layout():
    names = set(drafter(num_hidden_layers=1).state_dict())
    layer = {f"layers.0.self_attn.{p}_proj.weight" for p in "qkvo"} | {
        f"layers.0.mlp.{p}_proj.weight" for p in ("gate", "up", "down")
    }
    norms = {"layers.0.self_attn.q_norm.weight", "layers.0.self_attn.k_norm.weight"}
    norms |= {"layers.0.input_layernorm.weight", "layers.0.post_attention_layernorm.weight"}
    assert names == layer | norms | {"fc.weight", "hidden_norm.weight", "norm.weight"}


def test_config_fields():
    """z-lab's Qwen3-8B drafter: 36 target layers, 5 draft layers, block_size at the top level."""
    assert default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    assert default_target_layer_ids(36, 1) == [18]
    config = drafter().raw_config | {"num_hidden_layers": 5, "num_target_layers": 36, "block_size": 16}
    config["dflash_config"] = {"mask_token_id": 151669}
    with torch.device("meta"):
        model = DFlashDraftModel(config)
    assert (model.target_layer_ids, model.block_size, model.mask_token_id) == ((1, 9, 17, 25, 33), 16, 151669)
    config["dflash_config"] = {"mask_token_id": 7, "block_size": 8, "target_layer_ids": [2, 4, 6, 8, 10]}
    with torch.device("meta"):
        model = DFlashDraftModel(config)
    assert (model.target_layer_ids, model.block_size) == ((2, 4, 6, 8, 10), 8)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_context_features_are_decoder_layer_outputs(arch):
    """Layer id i reads hidden_states[i + 1]: the output of decoder layer i (z-lab's offset of 1)."""
    target = random_target(arch, vocab_size=16, hidden_size=HIDDEN, num_hidden_layers=6)
    captured = {}
    hooks = [
        layer.register_forward_hook(lambda _m, _i, out, i=i: captured.__setitem__(i, out))
        for i, layer in enumerate(target.model.layers)
    ]
    with torch.no_grad():
        out = target(torch.tensor([[1, 2, 3]]), output_hidden_states=True)
    for hook in hooks:
        hook.remove()
    for layer_id in range(5):  # the last layer's entry is the final-normed state in HF
        output = captured[layer_id][0] if isinstance(captured[layer_id], tuple) else captured[layer_id]
        torch.testing.assert_close(_features(out.hidden_states, (layer_id,)), output)
    expected = torch.cat([captured[1], captured[3]], dim=-1)
    torch.testing.assert_close(_features(out.hidden_states, (1, 3)), expected)


def test_proposer_drafts_after_the_bonus_token():
    target = random_target("qwen3", vocab_size=16, hidden_size=HIDDEN, num_hidden_layers=6)
    model = drafter()
    proposer = DFlashProposer(model, target)
    context = inputs(model, context=3)[1]
    proposer.add_context(context)
    with torch.no_grad():
        logits = proposer.propose([5, 6, 7, 9])
        assert logits.shape == (1, model.block_size - 1, 16)
        block = target.get_input_embeddings()(torch.tensor([[9, 3, 3, 3]]))
        expected = target.lm_head(model(block, context, model.new_cache())[:, 1:])
        torch.testing.assert_close(logits, expected)
        proposer.add_context(context[:, :1])
        with pytest.raises(RuntimeError, match="draft context"):
            proposer.propose([5, 6, 7, 9, 1, 2])


def test_a_draft_vocabulary_keeps_the_lowest_ids_and_the_kept_ones():
    target = random_target("qwen3", vocab_size=16, hidden_size=HIDDEN, num_hidden_layers=6)
    model = drafter()
    head = DraftHead(target, model.dtype, draft_vocab=5, keep=(2, 14, 99))  # 2 is already in; 99 is no token
    assert head.vocab_ids.tolist() == [0, 1, 2, 3, 4, 14]
    torch.testing.assert_close(head.weight, target.lm_head.weight[[0, 1, 2, 3, 4, 14]])
    assert DraftHead(target, model.dtype, draft_vocab=16).vocab_ids is None
    assert DraftHead(target, model.dtype).vocab_ids is None
    with pytest.raises(ValueError, match="draft_vocab must be >= 1"):
        DraftHead(target, model.dtype, draft_vocab=0)
    full, small = DFlashProposer(model, target), DFlashProposer(model, target, head=head)
    assert small.vocab_ids is head.vocab_ids and full.vocab_ids is None
    context = inputs(model, context=3)[1]
    full.add_context(context)
    small.add_context(context)
    with torch.no_grad():
        every, some = full.propose([5, 6, 7, 9]), small.propose([5, 6, 7, 9])
    assert some.shape == (1, model.block_size - 1, 6)  # logits over the draft vocabulary's rows
    torch.testing.assert_close(some, every[..., head.vocab_ids])
