"""The Triton top-k (ddtree_core/kernels/topk.py) against the host reference.

Token ids must be identical; log-probs are the same float32 values minus a logsumexp summed in
another order (per-tile sums merged per chunk and per row; exp2-based exp and log on the GPU), so
they agree to LOG_PROB_TOL: |difference| <= 8e-6 + 1e-6 * |log-prob|, about four float32 ulps of a
logsumexp up to 32 (the inputs here stay below that; the interpreter mostly matches bit for bit).
Small tiles and explicit chunk counts make small vocabularies run every path of the kernel (floor
from group maxima, shrinks, padded chunk lists, the merge, ranking by counting and by tl.sort).
"""

import dataclasses
from unittest import mock

import pytest
import torch

pytest.importorskip("triton")

from ddtree_core import batched, build_tree  # noqa: E402
from ddtree_core.kernels import topk  # noqa: E402
from ddtree_core.tree import draft_topk  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# the interpreter evaluates log(0) and inf - inf in numpy, which warns; the GPU gives the same -inf/NaN
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")
LOG_PROB_TOL = {"rtol": 1e-6, "atol": 8e-6, "equal_nan": True}


def make_logits(kind: str, shape: tuple[int, int, int], generator: torch.Generator) -> torch.Tensor:
    """Draft logits of one flavour; bf16/fp16 kinds keep their dtype (the kernel reads it directly)."""
    logits = torch.randn(shape, generator=generator) * 3
    if kind == "bf16":
        return (logits * 1.5).bfloat16()  # 8 significant bits: many exact ties
    if kind == "fp16":
        return logits.half()
    if kind == "fp64":
        return logits.double() / 7  # read as float32, as the reference does
    if kind == "ties":
        return torch.randint(-3, 1, shape, generator=generator).float()
    if kind == "inf":
        logits[torch.rand(shape, generator=generator) < 0.7] = float("-inf")
        logits[..., 0] = 0.0
    if kind == "sharp":
        logits[..., 5:9] += 12.0
    if kind == "signed_zeros":
        logits = torch.where(torch.rand(shape, generator=generator) < 0.5, -0.0, 0.0)
        logits[..., ::7] = -1.0
    if kind == "nan":
        logits[torch.rand(shape, generator=generator) < 0.1] = float("nan")
    if kind == "all_inf":
        logits[0, 0] = float("-inf")  # a row with no finite logit: log-probs NaN (as torch.logsumexp gives)
    return logits


def assert_topk_equal(out, ref):
    assert out.token_ids.dtype == torch.int64 and out.log_probs.dtype == torch.float32
    assert torch.equal(out.token_ids, ref.token_ids), (out.token_ids != ref.token_ids).nonzero()[:5].tolist()
    torch.testing.assert_close(out.log_probs, ref.log_probs, **LOG_PROB_TOL)


def test_worked_example_from_the_module_docstring():
    logits = torch.tensor([[[1.0, 3.0, 3.0, 0.0, 2.0, 3.0, 5.0, 1.0]]], device=DEVICE)
    out = topk.draft_topk(logits, 2, 1.0, tile=4, chunks=1)  # soft = 4: the second tile shrinks the list
    assert out.token_ids.tolist() == [[[6, 1]]]
    expected = torch.tensor([5.0, 3.0], device=DEVICE) - torch.logsumexp(logits[0, 0], 0)
    torch.testing.assert_close(out.log_probs[0, 0], expected, **LOG_PROB_TOL)


CASES = [
    # kind, shape, k, draft_temperature, tile, chunks
    ("randn", (2, 3, 300), 5, 1.0, 64, 1),  # one chunk: the first kernel writes the outputs
    ("randn", (1, 2, 1000), 20, 0.7, 64, 3),
    ("bf16", (2, 2, 1000), 17, 1.0, 64, 3),
    ("bf16", (1, 2, 700), 300, 1.3, 64, 2),  # ranked by tl.sort
    ("fp16", (1, 2, 500), 64, 1.0, 32, 4),
    ("ties", (1, 3, 500), 40, 1.0, 64, 2),
    ("inf", (2, 2, 400), 30, 1.0, 64, 3),
    ("sharp", (1, 4, 600), 8, 0.5, 64, 1),
    ("signed_zeros", (1, 2, 300), 50, 1.0, 32, 2),
    ("nan", (1, 2, 300), 290, 1.0, 64, 2),  # k reaches the NaNs, which rank last
    ("all_inf", (1, 2, 100), 7, 1.0, 16, 2),
    ("bf16", (1, 2, 100), 100, 1.0, 16, 3),  # k = V: chunks shorter than k pad their lists
    ("randn", (1, 1, 50), 1, 1.0, 16, 2),
    ("ties", (1, 1, 1500), 1024, 1.0, 256, 1),  # k = MAX_K
    ("fp64", (1, 2, 200), 10, 1.0, 64, 2),
    ("bf16", (1, 1, 152064), 256, 1.0, None, 4),  # the default tile
]
SLOW_CASES = [
    ("bf16", (1, 16, 152064), 256, 1.0, 2048, 8),
    ("randn", (4, 16, 32000), 64, 0.8, 2048, None),
    ("bf16", (2, 2, 152064), 1024, 1.0, 2048, 2),
]


def _case_id(case) -> str:
    kind, (b, length, v), k, temp, tile, chunks = case
    return f"{kind}-b{b}-L{length}-V{v}-k{k}-T{temp}-tile{tile}-c{chunks}"


@pytest.mark.parametrize("case", CASES + [pytest.param(c, marks=pytest.mark.slow) for c in SLOW_CASES], ids=_case_id)
def test_topk_equals_reference(case):
    kind, shape, k, temperature, tile, chunks = case
    logits = make_logits(kind, shape, torch.Generator().manual_seed(shape[2] + k)).to(DEVICE)
    ref = draft_topk(logits, k, draft_temperature=temperature, impl="reference")
    launch = {"chunks": chunks} if tile is None else {"chunks": chunks, "tile": tile}
    assert_topk_equal(topk.draft_topk(logits, k, temperature, **launch), ref)


def test_default_launch():
    logits = make_logits("bf16", (1, 6, 3000), torch.Generator().manual_seed(0)).to(DEVICE)
    with mock.patch.object(topk, "_launch", wraps=topk._launch) as launch:
        out = topk.draft_topk(logits, 40, 0.9)
    assert launch.call_count == 1
    assert_topk_equal(out, draft_topk(logits, 40, draft_temperature=0.9, impl="reference"))


def test_k_above_max_k_takes_the_torch_path():
    logits = make_logits("ties", (1, 1, topk.MAX_K + 40), torch.Generator().manual_seed(1)).to(DEVICE)
    with mock.patch.object(batched, "draft_topk", wraps=batched.draft_topk) as torch_path:
        out = topk.draft_topk(logits, topk.MAX_K + 1, 1.0)
    assert torch_path.call_count == 1
    assert_topk_equal(out, draft_topk(logits, topk.MAX_K + 1, impl="reference"))


def test_strided_inputs():
    wide = make_logits("bf16", (2, 3, 520), torch.Generator().manual_seed(2)).to(DEVICE)
    sliced = wide[..., :500]  # unit stride along V, rows 520 apart
    strided = wide[..., ::2]  # stride 2 along V: the rows are copied
    transposed = wide.transpose(1, 2).contiguous().transpose(1, 2)  # stride 3 along V
    for logits in (sliced, strided, transposed):
        ref = draft_topk(logits, 33, impl="reference")
        assert_topk_equal(topk.draft_topk(logits, 33, 1.0, tile=64, chunks=2), ref)


def test_empty_batch_and_bad_arguments():
    out = topk.draft_topk(torch.zeros(0, 4, 50, device=DEVICE), 3, 1.0)
    assert out.token_ids.shape == out.log_probs.shape == (0, 4, 3)
    logits = torch.zeros(1, 2, 50, device=DEVICE)
    with pytest.raises(ValueError, match="tile"):
        topk.draft_topk(logits, 3, 1.0, tile=48)
    with pytest.raises(ValueError, match="tile"):
        topk.draft_topk(logits, 3, 1.0, tile=2)
    with pytest.raises(ValueError, match="k"):
        topk.draft_topk(logits, 51, 1.0)


@pytest.mark.parametrize("kind, temperature", [("randn", 1.0), ("sharp", 0.8)])
def test_build_tree_end_to_end(kind, temperature):
    """Random float32 logits have no two paths whose scores tie to within the logsumexp's rounding,
    so the trees are identical; scores (sums of up to L log-probs) agree to L times LOG_PROB_TOL."""
    logits = make_logits(kind, (2, 8, 2000), torch.Generator().manual_seed(5)).to(DEVICE)
    budget = torch.tensor([48, 17], device=DEVICE)
    out = build_tree(logits, budget, draft_temperature=temperature, impl="triton")
    ref = build_tree(logits, budget, draft_temperature=temperature, impl="reference")
    for field in dataclasses.fields(ref):
        x, y = getattr(out, field.name), getattr(ref, field.name)
        if field.name == "scores":
            torch.testing.assert_close(x, y, rtol=8e-6, atol=8 * LOG_PROB_TOL["atol"])
        elif isinstance(y, torch.Tensor):
            assert torch.equal(x, y), field.name
        else:
            assert x == y, field.name


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("batch, k, temperature", [(1, 256, 1.0), (8, 64, 0.7), (64, 64, 1.0)])
def test_benchmark_shapes_on_cuda(batch, k, temperature):
    """The kernel-bench shapes with the default launch; 0.7 checks the reciprocal scaling of CUDA."""
    logits = make_logits("bf16", (batch, 16, 152064), torch.Generator().manual_seed(batch)).cuda()
    ref = draft_topk(logits, k, draft_temperature=temperature, impl="reference")
    assert_topk_equal(topk.draft_topk(logits, k, temperature), ref)
