"""Patch the working tree's top-K scan so that its three loads of the logits carry eviction_policy="evict_first"
(the timed variant of call 1: the stream of logits marked as the first lines the L2 gives up)."""

import pathlib

path = pathlib.Path("ddtree_core/kernels/topk_radix.py")
text = path.read_text()
edits = (
    ("raw = tl.load(src + offs, mask=offs < length, other=0.0)",
     'raw = tl.load(src + offs, mask=offs < length, other=0.0, eviction_policy="evict_first")'),
    ("ahead = tl.load(src + tl.minimum(t + 1, full - 1) * TILE + offs)",
     'ahead = tl.load(src + tl.minimum(t + 1, full - 1) * TILE + offs, eviction_policy="evict_first")'),
    ('raw = tl.load(src + tail + offs, mask=tail + offs < length, other=float("nan"))',
     'raw = tl.load(src + tail + offs, mask=tail + offs < length, other=float("nan"), eviction_policy="evict_first")'),
)
for old, new in edits:
    assert text.count(old) == 1, old
    text = text.replace(old, new)
path.write_text(text)
print("patched", len(edits), "loads")
