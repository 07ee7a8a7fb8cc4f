"""Inflation: a larger Llama target (and DFlash drafter) that computes the source's function.

Tiny seeded random models mirror the testbed pair's structure (9 query heads in 3 GQA groups, tied
embeddings; a drafter of 4 / 2 heads with q_norm and k_norm); their norm weights are drawn away from 1
so that a missing rescale shows. The last test inflates the real testbed pair.
"""

import json

import pytest
import torch
from typer.testing import CliRunner

from ddbench.cli import app
from ddbench.testbed import inflate
from ddbench.testbed import target as testbed
from ddbench.testbed.inflate import (
    INFLATION_FILE,
    PRESETS,
    InflationError,
    Layout,
    Shape,
    inflate_drafter,
    inflate_target,
    read_inflation,
)
from ddbench.testbed.inflate_check import check_prompts, compare_targets
from ddtree_core.reference.decode import SamplingConfig, SpecConfig, generate
from ddtree_core.reference.dflash import DFlashDraftModel, DFlashProposer
from ddtree_core.settings import TreeSettings

VOCAB = 64
SOURCE = Shape(hidden_size=72, intermediate_size=96, num_layers=4, num_heads=9, num_kv_heads=3, head_dim=8)
BIG = Shape(hidden_size=128, intermediate_size=160, num_layers=6, num_heads=16, num_kv_heads=4, head_dim=16)


def _randomize_norms(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)


def _source(folder, *, tied=True):
    """A seeded random LlamaForCausalLM (float32) with SOURCE's shape and a chat template file."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=SOURCE.hidden_size,
        num_hidden_layers=SOURCE.num_layers,
        num_attention_heads=SOURCE.num_heads,
        num_key_value_heads=SOURCE.num_kv_heads,
        head_dim=SOURCE.head_dim,
        intermediate_size=SOURCE.intermediate_size,
        initializer_range=0.3,
        tie_word_embeddings=tied,
        rms_norm_eps=1e-5,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    _randomize_norms(model)
    model.save_pretrained(folder)
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    return model


def _drafter(folder):
    drafter = DFlashDraftModel.random(
        seed=0,
        init_std=0.3,
        hidden_size=SOURCE.hidden_size,
        num_target_layers=SOURCE.num_layers,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=SOURCE.head_dim,
        intermediate_size=SOURCE.intermediate_size,
        block_size=5,
        mask_token_id=VOCAB - 1,
        vocab_size=VOCAB,
    )
    _randomize_norms(drafter)
    drafter.save_pretrained(folder)
    return drafter


def _load(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").eval()


def _prompts(count=3):
    return [torch.randint(0, VOCAB, (11,), generator=torch.Generator().manual_seed(s)).tolist() for s in range(count)]


def test_layout_places_heads_in_their_groups_and_dims_on_their_pairs():
    layout = Layout(SOURCE, BIG)
    # query head g * 3 + j -> slot g * 4 + j; KV head g -> slot g
    assert layout._slots("q").tolist() == [0, 1, 2, 4, 5, 6, 8, 9, 10]
    assert layout._slots("kv").tolist() == [0, 1, 2]
    # rotate-half pair p -> pair 2p: dims 0..3 -> 0, 2, 4, 6 and dims 4..7 -> 8, 10, 12, 14
    assert layout.head_dims().tolist() == [0, 2, 4, 6, 8, 10, 12, 14]
    assert layout.head_rows("kv")[:9].tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 16]
    assert layout.padded_dims_of_real_heads("kv")[:4].tolist() == [1, 3, 5, 7]
    extra = layout.extra_heads_on_real_kv().view(-1, BIG.head_dim)[:, 0].tolist()
    assert extra == [3 * 16, 7 * 16, 11 * 16]  # slots 3, 7, 11
    assert Layout(SOURCE, BIG.replace(head_dim=24)).head_dims().tolist() == [0, 3, 6, 9, 12, 15, 18, 21]


@pytest.mark.parametrize(
    "shape",
    [
        BIG,
        BIG.replace(head_dim=24),
        BIG.replace(hidden_size=144, num_heads=18, num_kv_heads=6, head_dim=8),
        BIG.replace(num_layers=4),
    ],
    ids=["x2-head-dim", "x3-head-dim", "same-head-dim", "same-layers"],
)
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_inflated_target_computes_the_same_function(tmp_path, shape, tied):
    source = _source(tmp_path / "src", tied=tied)
    dst, record = inflate_target(tmp_path / "src", tmp_path / "dst", shape, dtype=torch.float32)
    inflated = _load(dst)
    config = json.loads((dst / "config.json").read_text())
    assert Shape.of(config) == shape and config["tie_word_embeddings"] is False
    assert config["rms_norm_eps"] == pytest.approx(1e-5 * SOURCE.hidden_size / shape.hidden_size)
    assert record.parameters == shape.parameters(VOCAB) == sum(p.numel() for p in inflated.parameters())
    assert record.kv_bytes_per_token == 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * 2
    ids = torch.tensor(_prompts())
    with torch.no_grad():
        expected = source(ids, output_hidden_states=True)
        got = inflated(ids, output_hidden_states=True)
    scale = expected.logits.abs().max().item()
    assert (expected.logits - got.logits).abs().max().item() < 1e-5 * scale
    # What the DFlash drafter reads: the real layers' hidden states (HF's last one is after the final norm,
    # so it is left out), with the zero tail exactly zero.
    for layer in range(SOURCE.num_layers - 1):
        a, b = expected.hidden_states[layer + 1], got.hidden_states[layer + 1]
        assert (a - b[..., : SOURCE.hidden_size]).abs().max().item() < 1e-5 * a.abs().max().item()
        assert not b[..., SOURCE.hidden_size :].any()
    check = compare_targets(tmp_path / "src", dst, _prompts(), greedy_tokens=12)
    assert check.greedy_equal == 3 and check.top1_agreement == 1.0 and check.max_rel_logit_diff < 1e-5


def test_weights_that_multiply_zeros_are_random(tmp_path):
    _source(tmp_path / "src")
    dst, _ = inflate_target(tmp_path / "src", tmp_path / "dst", BIG, dtype=torch.float32)
    state = _load(dst).state_dict()
    zeros = sum((tensor == 0).sum().item() for tensor in state.values())
    assert zeros / sum(tensor.numel() for tensor in state.values()) < 0.2
    tail = state["model.embed_tokens.weight"][:, SOURCE.hidden_size :]
    assert not tail.any()  # the residual's zero tail starts here
    assert state["lm_head.weight"][:, SOURCE.hidden_size :].abs().min() > 0  # reads the tail: free


def test_the_rescales_matter(tmp_path):
    """Without the norm rescale (or with the source's epsilon) the function changes."""
    source = _source(tmp_path / "src")
    dst, _ = inflate_target(tmp_path / "src", tmp_path / "dst", BIG, dtype=torch.float32)
    config = json.loads((dst / "config.json").read_text())
    config["rms_norm_eps"] = 1e-5
    (dst / "config.json").write_text(json.dumps(config))
    ids = torch.tensor(_prompts())
    with torch.no_grad():
        diff = (source(ids).logits - _load(dst)(ids).logits).abs().max().item()
    assert diff > 1e-4


def test_inflated_pair_drafts_and_decodes_as_the_source(tmp_path):
    """DFLASH and DDTree: the same blocks, trees, acceptance and tokens on the source and inflated pairs."""
    _source(tmp_path / "src")
    _drafter(tmp_path / "dsrc")
    inflate_target(tmp_path / "src", tmp_path / "dst", BIG, dtype=torch.float32)
    ddst, record = inflate_drafter(tmp_path / "dsrc", tmp_path / "ddst", target=BIG, dtype=torch.float32)
    config = json.loads((ddst / "config.json").read_text())
    assert Shape.of(config) == BIG.replace(num_layers=5) and config["num_target_layers"] == BIG.num_layers
    assert config["dflash_config"] == json.loads((tmp_path / "dsrc" / "config.json").read_text())["dflash_config"]
    assert record.parameters == sum(p.numel() for p in DFlashDraftModel.from_pretrained(ddst).parameters())
    assert not testbed.is_testbed_drafter(ddst)  # inflated from a drafter that is not the bundled one
    pairs = [
        (_load(tmp_path / "src"), DFlashDraftModel.from_pretrained(tmp_path / "dsrc", dtype=torch.float32)),
        (_load(tmp_path / "dst"), DFlashDraftModel.from_pretrained(ddst, dtype=torch.float32)),
    ]
    for spec in (SpecConfig(method="dflash"), SpecConfig(method="ddtree", tree=TreeSettings(8, None))):
        runs = [
            generate(
                target,
                [1, 2, 3, 4, 5],
                SamplingConfig(max_new_tokens=24),
                spec,
                proposer=DFlashProposer(drafter, target),
                trace=True,
            )
            for target, drafter in pairs
        ]
        assert runs[0].tokens == runs[1].tokens
        assert runs[0].trace == runs[1].trace
        assert runs[0].accept_lengths == runs[1].accept_lengths


def test_bfloat16_rounds_only_the_scaled_weights(tmp_path):
    _source(tmp_path / "src")
    _, record = inflate_target(tmp_path / "src", tmp_path / "dst", BIG)
    assert record.rounded == ("residual norm weights", "q_proj")  # sqrt(72/128) = 3/4 and sqrt(2)
    _, record = inflate_target(tmp_path / "src", tmp_path / "dst4", BIG.replace(hidden_size=288, head_dim=8))
    assert record.rounded == ()  # sqrt(72/288) = 1/2: no rounding
    state = _load(tmp_path / "dst4").state_dict()
    source = _load(tmp_path / "src").state_dict()
    name = "model.layers.0.input_layernorm.weight"
    assert torch.equal(state[name][: SOURCE.hidden_size], source[name].bfloat16().float() / 2)


def test_llama3_preset_sizes():
    shape, reference = PRESETS["llama3-8b"]
    assert shape.parameters(128_256) == reference.parameters  # the formula gives Llama-3.1-8B's count
    assert shape.kv_bytes_per_token() == reference.kv_bytes_per_token
    testbed_vocab = 49_152
    assert abs(shape.parameters(testbed_vocab) / reference.parameters - 1) < 0.10


@pytest.mark.parametrize(
    "sizes, message",
    [
        ({"hidden_size": 64}, "hidden_size 64 is smaller than the source's 72"),
        ({}, "nothing to inflate"),
        ({"num_heads": 18, "num_kv_heads": 4}, "4 KV heads do not divide 18 query heads"),
        ({"num_heads": 12, "num_kv_heads": 6}, "give 2 query heads per KV head, fewer than the source's 3"),
        ({"head_dim": 12}, "head_dim 12 is not a multiple of the source's 8"),
        ({"hidden_size": 80}, "hidden_size 80 is not a multiple of the 9 query heads"),
    ],
)
def test_bad_shapes_are_refused(tmp_path, sizes, message):
    _source(tmp_path / "src")
    with pytest.raises(InflationError, match=message):
        inflate_target(tmp_path / "src", tmp_path / "dst", SOURCE.replace(**sizes))
    assert not (tmp_path / "dst").exists()


def test_existing_destination(tmp_path):
    _source(tmp_path / "src")
    dst, record = inflate_target(tmp_path / "src", tmp_path / "dst", BIG)
    stamp = (dst / "model.safetensors").stat().st_mtime_ns
    assert inflate_target(tmp_path / "src", tmp_path / "dst", BIG) == (dst, record)
    assert (dst / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(FileExistsError, match="exists"):
        inflate_target(tmp_path / "src", tmp_path / "dst", BIG.replace(num_layers=8))
    assert read_inflation(dst) == record and (dst / "chat_template.jinja").read_text() == "{{ messages }}"


def test_shards_and_index(tmp_path, monkeypatch):
    _source(tmp_path / "src")
    monkeypatch.setattr(inflate, "SHARD_BYTES", 200_000)
    dst, record = inflate_target(tmp_path / "src", tmp_path / "dst", BIG, dtype=torch.float32)
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    shards = sorted(path.name for path in dst.glob("*.safetensors"))
    assert len(shards) > 2 and sorted(set(index["weight_map"].values())) == shards
    assert index["metadata"]["total_size"] == 4 * record.parameters
    assert compare_targets(tmp_path / "src", dst, _prompts(1), greedy_tokens=4).greedy_equal == 1


def test_cli(tmp_path):
    _source(tmp_path / "src")
    _drafter(tmp_path / "dsrc")
    args = ["testbed", "inflate", str(tmp_path / "src"), str(tmp_path / "dst")]
    sizes = ["--hidden-size", "128", "--num-heads", "16", "--num-kv-heads", "4", "--head-dim", "16"]
    draft = ["--draft", str(tmp_path / "dsrc"), str(tmp_path / "ddst"), "--draft-layers", "3"]
    result = CliRunner().invoke(app, args + sizes + draft)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == str((tmp_path / "dst").resolve())
    assert Shape.of(json.loads((tmp_path / "ddst" / "config.json").read_text())).num_layers == 3
    assert (tmp_path / "ddst" / INFLATION_FILE).is_file()
    for bad, message in [
        (["--num-kv-heads", "5"], "error: 5 KV heads do not divide 9 query heads"),
        (["--preset", "llama3-70b"], "error: unknown preset 'llama3-70b'; choose one of llama3-8b, qwen3-8b"),
        (["--dtype", "float16"], "error: --dtype must be bfloat16 or float32, got 'float16'"),
    ]:
        result = CliRunner().invoke(app, ["testbed", "inflate", str(tmp_path / "src"), str(tmp_path / "x")] + bad)
        assert result.exit_code == 2 and result.stderr.strip() == message, result.output
    assert not (tmp_path / "x").exists()


@pytest.fixture(scope="module")
def testbed_target():
    """The real SmolLM2-135M-Instruct folder (from the cache, else converted from its PyPI GGUF)."""
    from ddbench.testbed import target as testbed

    try:
        return testbed.prepare_target()
    except testbed.TargetUnavailableError as error:
        pytest.skip(f"the testbed target is unavailable here: {str(error).splitlines()[0]}")


def test_testbed_pair_inflated(tmp_path, testbed_target, data_dir):
    """The testbed pair at hidden 1024, head dim 128, 36 layers, 16 / 4 heads (float32): same logits to 1e-4
    relative, same greedy text on GSM8K evaluation prompts, same DFLASH and DDTree acceptance in the reference
    engine."""
    shape = Shape(1024, 1536, 36, 16, 4, 128)
    dst, _ = inflate_target(testbed_target, tmp_path / "target", shape, dtype=torch.float32)
    ddst, _ = inflate_drafter(
        testbed.DRAFTER_DIR, tmp_path / "drafter", target=shape, num_layers=3, dtype=torch.float32
    )
    prompts = check_prompts(testbed_target, 2, str(data_dir))
    assert testbed.is_testbed_drafter(ddst)  # sweeps of the inflated pair keep to the held-out prompts
    check = compare_targets(testbed_target, dst, prompts, greedy_tokens=12)
    assert check.max_rel_logit_diff < 1e-4 and check.top1_agreement == 1.0 and check.greedy_equal == 2
    pairs = [
        (_load(testbed_target), DFlashDraftModel.from_pretrained(testbed.DRAFTER_DIR, dtype=torch.float32)),
        (_load(dst), DFlashDraftModel.from_pretrained(ddst, dtype=torch.float32)),
    ]
    for spec in (SpecConfig(method="dflash"), SpecConfig(method="ddtree", tree=TreeSettings(64, None))):
        runs = [
            generate(target, prompts[0], SamplingConfig(max_new_tokens=24), spec, proposer=DFlashProposer(d, target))
            for target, d in pairs
        ]
        assert runs[0].tokens == runs[1].tokens
        assert runs[0].accept_lengths == runs[1].accept_lengths
        assert sum(runs[0].accept_lengths) / len(runs[0].accept_lengths) > 1.5  # a trained pair accepts
