"""DDTree speculative decoding: draft trees, verification walks, masks, KV plans and metrics.

Importing this package needs only torch and numpy; Triton, transformers and SGLang are imported
lazily by the parts that use them.
"""

from ddtree_core.tree import DraftTopK, DraftTree, build_tree, build_tree_from_topk, draft_topk

__all__ = ["DraftTopK", "DraftTree", "build_tree", "build_tree_from_topk", "draft_topk"]
