"""Fixtures for the ddbench CLI tests: a tiny random target/drafter pair and a small prompt file."""

import json
from pathlib import Path

import pytest
import torch

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_tokenizer():
    """A byte-level tokenizer with no merges (256 byte tokens + 4 specials) and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: index for index, symbol in enumerate(sorted(alphabet))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIALS))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def make_tiny_pair(root: Path, *, seed: int = 0, block_size: int = 4) -> tuple[Path, Path]:
    """A random 4-layer Llama target (+ tokenizer) and a random 1-layer DFlash drafter, float32."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from ddtree_core.reference.dflash import DFlashDraftModel

    tokenizer = byte_tokenizer()
    target_dir, draft_dir = root / "target", root / "draft"
    vocab = len(tokenizer)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    target = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # larger weights than HF's init give logits with clear winners (few near-ties)
        for param in target.parameters():
            if param.dim() > 1:
                param.normal_(0, 0.2)
    target.save_pretrained(target_dir)
    tokenizer.save_pretrained(target_dir)
    drafter = DFlashDraftModel.random(
        seed=seed + 1,
        hidden_size=64,
        num_target_layers=4,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab,
        block_size=block_size,
        mask_token_id=tokenizer.convert_tokens_to_ids("<|mask|>"),
    )
    drafter.save_pretrained(draft_dir)
    return target_dir, draft_dir


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory) -> tuple[Path, Path]:
    return make_tiny_pair(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def prompt_file(tmp_path_factory) -> Path:
    """Three short prompts, one of them with two turns."""
    path = tmp_path_factory.mktemp("prompts") / "tiny.jsonl"
    rows = [
        {"prompt": "What is 2 + 3?"},
        {"turns": ["Name a color.", "Now another one."]},
        {"prompt": "Say hello."},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="session")
def swept(tiny_pair, prompt_file, tmp_path_factory) -> Path:
    """One reference-engine sweep (AR, DFLASH, DDTree b2 and b8, 8 tokens) run by two CPU workers in parallel;
    tests read it (copy it to change it)."""
    from typer.testing import CliRunner

    from ddbench.cli import app

    target, draft = tiny_pair
    out = tmp_path_factory.mktemp("sweep") / "run"
    result = CliRunner().invoke(app, ["sweep", "--engine", "reference", "--model", str(target), "--draft", str(draft),
                                      "--datasets", str(prompt_file), "--budgets", "2,8", "--max-new-tokens", "8",
                                      "--out", str(out), "--workers", "2"])  # fmt: skip
    assert result.exit_code == 0, result.output
    return out
