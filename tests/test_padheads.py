"""Attention-head padding: the padded folder computes the source's function, with the source's GQA grouping.

A tiny random Llama mirrors the testbed target: 9 query heads in 3 GQA groups of 3, head_dim 8 given
only implicitly (hidden 72 / 9 heads, no head_dim in config.json), tied embeddings, random attention
biases in one variant and sharded weights in another.
"""

import json

import pytest
import torch
from typer.testing import CliRunner

from ddbench.cli import app
from ddbench.testbed.padheads import (
    PADDING_FILE,
    HeadPadding,
    HeadPaddingError,
    pad_attention_heads,
    pad_attention_tensor,
)
from ddtree_core.reference.decode import SamplingConfig, SpecConfig, generate
from ddtree_core.reference.dflash import DFlashDraftModel, DFlashProposer
from ddtree_core.settings import TreeSettings

VOCAB = 64
HEADS, KV_HEADS, HEAD_DIM = 9, 3, 8
LAYERS = 4
EXTRA_FILES = {"chat_template.jinja": "{{ messages }}", "ddbench_manifest.json": '{"source": "test"}\n'}


def _source(folder, *, bias=False, shard=False):
    """Save a seeded random LlamaForCausalLM (float32) with extra files into `folder`; returns the model."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HEADS * HEAD_DIM,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        intermediate_size=96,
        initializer_range=0.3,
        attention_bias=bias,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.3)  # HF initialises biases to zero, which would hide a misplaced bias row
    model.save_pretrained(folder, max_shard_size="40KB" if shard else "1GB")
    settings = json.loads((folder / "config.json").read_text())
    del settings["head_dim"]  # as in configs that leave head_dim to hidden_size / num_attention_heads
    (folder / "config.json").write_text(json.dumps(settings))
    for name, text in EXTRA_FILES.items():
        (folder / name).write_text(text)
    return model


def _load(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").eval()


def _forward(model, input_ids):
    with torch.no_grad():
        return model(input_ids, output_hidden_states=True)


def _input_ids(seed=1):
    return torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(seed))  # [B, T]


@pytest.mark.parametrize(
    "bias, shard, num_heads, num_kv_heads",
    [(False, False, 12, 4), (True, False, 12, 4), (False, True, 12, 4), (False, False, 18, 6)],
    ids=["12-4", "12-4-bias", "12-4-sharded", "18-6"],
)
def test_padded_model_computes_the_same_function(tmp_path, bias, shard, num_heads, num_kv_heads):
    _source(tmp_path / "src", bias=bias, shard=shard)
    dst = pad_attention_heads(tmp_path / "src", tmp_path / "dst", num_heads=num_heads, num_kv_heads=num_kv_heads)
    source, padded = _load(tmp_path / "src"), _load(dst)
    config = padded.config
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (num_heads, num_kv_heads, 8)
    assert (config.hidden_size, config.num_hidden_layers) == (72, LAYERS)
    assert padded.model.layers[0].self_attn.q_proj.weight.shape == (num_heads * HEAD_DIM, 72)
    assert padded.model.layers[0].self_attn.o_proj.weight.shape == (72, num_heads * HEAD_DIM)
    expected, got = _forward(source, _input_ids()), _forward(padded, _input_ids())
    diff = (expected.logits - got.logits).abs().max().item()
    assert diff < 1e-6, f"max |logit difference| {diff}"
    # What the DFlash drafter reads: every layer's hidden states, the embedding and the (tied) lm_head.
    for layer, (a, b) in enumerate(zip(expected.hidden_states, got.hidden_states, strict=True)):
        assert (a - b).abs().max().item() < 1e-6, f"hidden states after layer {layer - 1} differ"
    assert torch.equal(source.get_input_embeddings().weight, padded.get_input_embeddings().weight)
    assert torch.equal(source.get_output_embeddings().weight, padded.get_output_embeddings().weight)
    if shard:  # the index's totals describe the padded shards
        totals = json.loads((dst / "model.safetensors.index.json").read_text())["metadata"]
        parameters = sum(tensor.numel() for tensor in padded.state_dict().values()) - VOCAB * 72  # lm_head is tied
        assert (totals["total_size"], totals.get("total_parameters", parameters)) == (4 * parameters, parameters)


def test_the_grouping_matters(tmp_path):
    """The same zero-padded tensors under 12 query / 3 KV heads (groups of 4) change the logits, so the
    equality above depends on keeping the source's groups of 3."""
    from transformers import LlamaForCausalLM

    source = _source(tmp_path / "src")
    padding = HeadPadding("src", HEADS, KV_HEADS, 12, KV_HEADS, HEAD_DIM)
    state = {name: pad_attention_tensor(name, tensor, padding) for name, tensor in source.state_dict().items()}
    config = source.config.to_dict() | {"num_attention_heads": 12, "head_dim": HEAD_DIM}
    regrouped = LlamaForCausalLM(type(source.config).from_dict(config)).eval()
    regrouped.load_state_dict(state)
    diff = (_forward(source, _input_ids()).logits - _forward(regrouped, _input_ids()).logits).abs().max().item()
    assert diff > 1e-2


def test_padded_pair_drafts_and_decodes_as_the_source(tmp_path):
    """DDTree with a DFlash drafter: the same trees, acceptance and tokens on the source and the padded target."""
    _source(tmp_path / "src")
    source, padded = _load(tmp_path / "src"), _load(pad_attention_heads(tmp_path / "src", tmp_path / "dst"))
    drafter = DFlashDraftModel.random(
        seed=0,
        init_std=0.3,
        hidden_size=72,
        num_target_layers=LAYERS,
        num_hidden_layers=2,
        block_size=5,
        mask_token_id=VOCAB - 1,
        vocab_size=VOCAB,
    )
    runs = [
        generate(
            target,
            [1, 2, 3, 4, 5],
            SamplingConfig(max_new_tokens=24),
            SpecConfig(method="ddtree", tree=TreeSettings(8, None)),
            proposer=DFlashProposer(drafter, target),
            trace=True,
        )
        for target in (source, padded)
    ]
    assert runs[0].tokens == runs[1].tokens
    assert runs[0].trace == runs[1].trace
    assert runs[0].accept_lengths == runs[1].accept_lengths


def test_files_copied_and_padding_recorded(tmp_path):
    _source(tmp_path / "src")
    dst = pad_attention_heads(tmp_path / "src", tmp_path / "dst")
    for name, text in EXTRA_FILES.items():
        assert (dst / name).read_text() == text
    assert (dst / "generation_config.json").read_bytes() == (tmp_path / "src" / "generation_config.json").read_bytes()
    record = json.loads((dst / PADDING_FILE).read_text())
    assert record == {
        "source": str((tmp_path / "src").resolve()),
        "source_num_heads": 9,
        "source_num_kv_heads": 3,
        "num_heads": 12,
        "num_kv_heads": 4,
        "head_dim": 8,
    }
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []  # no staging left


def test_existing_destination(tmp_path):
    _source(tmp_path / "src")
    dst = pad_attention_heads(tmp_path / "src", tmp_path / "dst")
    stamp = (dst / "model.safetensors").stat().st_mtime_ns
    assert pad_attention_heads(tmp_path / "src", tmp_path / "dst") == dst  # the same padding: kept as it is
    assert (dst / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(FileExistsError, match="exists"):
        pad_attention_heads(tmp_path / "src", tmp_path / "dst", num_heads=18, num_kv_heads=6)


@pytest.mark.parametrize("num_heads, num_kv_heads", [(12, 3), (10, 4), (16, 4), (6, 2), (3, 1), (9, 2)])
def test_impossible_padding_is_refused(tmp_path, num_heads, num_kv_heads):
    _source(tmp_path / "src")
    with pytest.raises(HeadPaddingError, match=r"query heads per KV head must stay 3, e\.g\. 12 / 4"):
        pad_attention_heads(tmp_path / "src", tmp_path / "dst", num_heads=num_heads, num_kv_heads=num_kv_heads)
    assert not (tmp_path / "dst").exists()


def test_cli_pad_heads(tmp_path):
    _source(tmp_path / "src")

    def pad(dst, *args):
        return CliRunner().invoke(app, ["testbed", "pad-heads", str(tmp_path / "src"), str(tmp_path / dst), *args])

    result = pad("a")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str((tmp_path / "a").resolve())
    result = pad("b", "--num-kv-heads", "5")
    assert result.exit_code == 2
    assert "error: cannot pad 9 query / 3 KV heads to 12 / 5" in result.stderr
    result = pad("c", "--num-heads", "18", "--num-kv-heads", "6")
    assert result.exit_code == 0 and result.stdout.strip() == str((tmp_path / "c").resolve())
    assert json.loads((tmp_path / "c" / "config.json").read_text())["num_attention_heads"] == 18
    assert pad("d", "--num-heads", "13").exit_code == 2
