"""Triton kernels for the DDTree hot paths, each the twin of a reference function.

- `topk.draft_topk`: the drafter's top-K lists in one read of the logits (twin of
  `tree.draft_topk(impl="reference")`: token ids equal, log-probs to the rounding of the logsumexp).
- `topk_radix.draft_topk`: the same lists from group maxima (one full read, then K groups read back), for large
  batches; not dispatched yet: `python -m ddbench.topk_tune` times it beside `topk`.
- `tree_build.build_tree_from_topk`: the draft trees of a batch from their top-K lists
  (twin of `tree.build_tree_from_topk(impl="reference")`, equal field by field).
- `tree_walk.follow_tree`: the verification walk (twin of `verify.follow_tree`).
- `tree_walk.ancestor_mask`: the dense ancestor mask and the verify positions of every node
  (twin of `mask.ancestor_mask` and `encoding.positions`).
- `round_tail.round_tail`: the walk, the committed path and the stats rows of an SGLang round in one
  launch (twin of `sglang.rounds.round_tail(impl="torch")`; the expected-length column to rounding).
- `round_inputs.draft_block_inputs` / `round_inputs.verify_batch`: an SGLang round's drafter block with
  every verify KV slot, and its verify tokens, positions and FULL_MASK mask, one launch each (twins of
  `sglang.rounds.draft_block_inputs` / `verify_batch(impl="torch")`, equal).
- `kv_move.move_path_kv`: the accepted path's KV rows into place in every buffer of a slot-row pool
  (equal to `kv.apply_plan` of the compaction plan).

Importing `ddtree_core` never imports this package; the dispatch in `ops` reaches it only for
impl="triton". On a machine without a GPU the kernels run under TRITON_INTERPRET=1.
"""
