"""Drafter training: the multi-block training pass equals the inference pass block by block."""

import torch

from ddbench.testbed import train
from ddbench.testbed.train import TrainConfig, block_inputs, fit, make_batch, next_token_logits, training_loss
from ddtree_core.reference.dflash import DFlashDraftModel
from ddtree_core.reference.loading import random_target

HIDDEN, LAYERS, VOCAB, BLOCK = 32, 4, 16, 4


def tiny_pair(seed=0):
    target = random_target("llama", vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, seed=seed)
    drafter = DFlashDraftModel.random(
        seed=seed,
        init_std=0.2,
        hidden_size=HIDDEN,
        num_target_layers=LAYERS,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        block_size=BLOCK,
        mask_token_id=VOCAB - 1,
        target_layer_ids=[1, 2],
    )
    return target, drafter


def config(**overrides):
    fields = dict(target="", prompts="", out="", mask_token_id=VOCAB - 1, block_size=BLOCK, device="cpu")
    return TrainConfig(**{**fields, **overrides})


def test_block_inputs_by_hand():
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    anchors = torch.tensor([[1, 3]])
    block_ids, positions, labels, mask = block_inputs(ids, anchors, torch.tensor([6]), config())
    assert block_ids.tolist() == [[6, 15, 15, 15, 8, 15, 15, 15]]
    assert positions.tolist() == [[1, 2, 3, 4, 3, 4, 5, 6]]
    assert labels.tolist() == [[-100, 7, 8, 9, -100, 9, 10, -100]]  # position 6 is past the sequence
    context, blocks = mask[0, :, :6].int(), mask[0, :, 6:].int()
    assert context[0].tolist() == [1, 0, 0, 0, 0, 0] and context[4].tolist() == [1, 1, 1, 0, 0, 0]
    assert blocks[1].tolist() == [1, 1, 1, 1, 0, 0, 0, 0] and blocks[7].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_training_pass_equals_inference_pass():
    target, drafter = tiny_pair()
    ids = torch.randint(0, VOCAB - 1, (2, 12), generator=torch.Generator().manual_seed(0))
    anchors = torch.tensor([[3, 7], [5, 9]])
    with torch.no_grad():
        hidden = target(input_ids=ids, output_hidden_states=True).hidden_states
        features = torch.cat([hidden[i + 1] for i in drafter.target_layer_ids], dim=-1)
        block_ids, positions, _, mask = block_inputs(ids, anchors, torch.tensor([12, 12]), config())
        embed = target.get_input_embeddings()
        trained = drafter.forward_blocks(embed(block_ids), positions, features, mask)
        for row in range(2):
            for j, anchor in enumerate(anchors[row].tolist()):
                block = block_ids[row : row + 1, j * BLOCK : (j + 1) * BLOCK]
                inferred = drafter(embed(block), features[row : row + 1, :anchor], drafter.new_cache())
                torch.testing.assert_close(trained[row, j * BLOCK : (j + 1) * BLOCK], inferred[0])


def test_make_batch_anchors_inside_answers():
    generator = torch.Generator().manual_seed(0)
    sequences = [(list(range(10)), 4), ([1, 2, 3], 3)]
    ids, anchors = make_batch(sequences, config(blocks_per_seq=16), 0, generator)
    assert ids.shape == (2, 10)
    assert ((anchors[0] >= 3) & (anchors[0] <= 8)).all()
    assert (anchors[1] == -1).all()  # no answer token: no block


def test_fit_lowers_the_loss_on_a_memorised_sequence():
    target, drafter = tiny_pair(seed=1)
    sequence = torch.randint(0, VOCAB - 1, (24,), generator=torch.Generator().manual_seed(3)).tolist()
    losses = []
    cfg = config(steps=40, batch_size=2, blocks_per_seq=4, lr=3e-3, warmup=5)
    fit(drafter, target, [(sequence, 2)], cfg, 0, lambda r: losses.append(r.get("loss")))
    losses = [x for x in losses if x is not None]
    assert losses[-1] < 0.7 * losses[0], losses


def test_max_seconds_stops_by_the_clock_and_the_cosine_follows_it(monkeypatch):
    clock = iter(range(1000))
    monkeypatch.setattr(train.time, "time", lambda: float(next(clock)))  # one second per reading
    target, drafter = tiny_pair(seed=1)
    sequence = list(range(12))
    rows = []
    fit(drafter, target, [(sequence, 2)], config(steps=1000, batch_size=1, max_seconds=10, warmup=2), 0, rows.append)
    assert rows[-1]["event"] == "trained" and rows[-1]["steps"] == 9 and rows[-1]["loss"] is not None
    assert train._lr_factor(0, 2, 0.0) == 0.5 and train._lr_factor(5, 2, 0.0) == 1.0
    assert abs(train._lr_factor(5, 2, 0.5) - 0.55) < 1e-9 and abs(train._lr_factor(5, 2, 1.5) - 0.1) < 1e-9


def test_init_continues_from_a_saved_drafter_of_the_same_shape(tmp_path):
    _, saved = tiny_pair(seed=1)
    saved.to(torch.bfloat16).save_pretrained(tmp_path / "d")
    _, drafter = tiny_pair(seed=2)
    train.start_from(drafter, tmp_path / "d")
    for name, weight in drafter.state_dict().items():
        assert weight.dtype == torch.float32
        assert torch.equal(weight, saved.state_dict()[name].to(torch.float32)), name


def test_init_of_another_shape_or_a_corrupt_file_is_one_line(tmp_path):
    _, saved = tiny_pair()
    saved.save_pretrained(tmp_path / "d")
    other = DFlashDraftModel.random(
        hidden_size=HIDDEN, num_target_layers=LAYERS, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, block_size=BLOCK, mask_token_id=VOCAB - 1, target_layer_ids=[1, 2],
    )  # fmt: skip
    for path, words in ((tmp_path / "d", "differs from the one asked for in num_hidden_layers"),
                        (tmp_path / "none", "does not load")):  # fmt: skip
        try:
            train.start_from(other, path)
        except train.InitError as error:
            assert words in str(error) and "\n" not in str(error)
        else:
            raise AssertionError("no InitError")
    (tmp_path / "d" / "model.safetensors").write_bytes(b"\0" * 64)
    _, same = tiny_pair()
    try:
        train.start_from(same, tmp_path / "d")
    except train.InitError as error:
        assert "does not load" in str(error) and "\n" not in str(error)
    else:
        raise AssertionError("no InitError")


def test_next_token_logits_are_the_targets_own_at_the_position_before():
    target, _ = tiny_pair()
    ids = torch.randint(0, VOCAB - 1, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = target(input_ids=ids, output_hidden_states=True)
        positions = torch.tensor([[4, 5, 9], [1, 2, 3]])
        got = next_token_logits(target, out.hidden_states[-1], positions)
    for row in range(2):
        for j, position in enumerate(positions[row].tolist()):
            torch.testing.assert_close(got[row, j], out.logits[row, position - 1])


def test_soft_labels_mix_the_answer_and_the_targets_distribution():
    target, drafter = tiny_pair(seed=1)
    ids = torch.randint(0, VOCAB - 1, (2, 14), generator=torch.Generator().manual_seed(2))
    anchors, lengths = torch.tensor([[3, 7], [5, 8]]), torch.tensor([14, 11])
    weights = torch.exp(-torch.arange(BLOCK).clamp(min=1).sub(1) / 7.0)

    def loss(soft):
        with torch.no_grad():
            return training_loss(drafter, target, ids, anchors, lengths, weights, config(soft_labels=soft))[0]

    # by hand: the weighted cross-entropy against the target's softmax at the position before each label
    block_ids, positions, labels, mask = block_inputs(ids, anchors, lengths, config())
    with torch.no_grad():
        out = target(input_ids=ids, output_hidden_states=True)
        features = torch.cat([out.hidden_states[i + 1] for i in drafter.target_layer_ids], dim=-1)
        states = drafter.forward_blocks(target.get_input_embeddings()(block_ids), positions, features, mask)
        log_q = target.get_output_embeddings()(states).log_softmax(-1)
        before = (positions - 1).clamp(min=0)
        teacher = torch.stack([out.logits[row, before[row]] for row in range(2)]).softmax(-1)
    soft_ce = -(teacher * log_q).sum(-1)
    w = weights[torch.arange(labels.shape[1]) % BLOCK].unsqueeze(0) * (labels != -100)
    torch.testing.assert_close(loss(1.0), (soft_ce * w).sum() / w.sum())
    torch.testing.assert_close(loss(0.5), (loss(0.0) + loss(1.0)) / 2)
    assert not torch.isclose(loss(0.0), loss(1.0))


def test_soft_labels_outside_0_1_are_one_line_and_write_nothing(tmp_path):
    from typer.testing import CliRunner

    from ddbench.cli import app

    out = tmp_path / "d"
    args = ["--target", str(tmp_path), "--out", str(out), "--mask-token-id", "1", "--answers", str(tmp_path / "a")]
    result = CliRunner().invoke(app, ["testbed", "train", *args, "--soft-labels", "1.5"])
    assert result.exit_code == 2 and not out.exists()
    assert result.output.strip() == "error: --soft-labels must lie in [0, 1], got 1.5"
