"""Triton kernels for the DDTree hot paths, each the twin of a reference function.

- `topk_radix.draft_topk`: the drafter's top-K lists from group maxima (one full read of the logits, then the
  K best groups read back; for few rows and K >= 128, each tile's candidates above a floor first); twin of
  `tree.draft_topk(impl="reference")`: token ids equal, log-probs to the rounding of the logsumexp. The one
  `tree.draft_topk(impl="triton")` dispatches to; `topk_lists.py` holds its order keys, entries and K-list
  selection and ranking.
- `tree_build.build_tree_from_topk`: the draft trees of a batch from their top-K lists
  (twin of `tree.build_tree_from_topk(impl="reference")`, equal field by field); its two builds are
  `tree_tails.py` (by deviations from the chain) and `tree_levels.py` (by levels), their shared keys, selections
  and bounds `tree_bound.py`.
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
- `pdl`: programmatic dependent launch for the round's kernels (Hopper and later; DDTREE_PDL=0 turns it off):
  each kernel may be scheduled while the one before it finishes, and waits for it before reading.
- `clock`: phase stamps inside a program (the SM's cycle counter, CUDA only) for the build and the top-K's
  selection (`build_tree_from_topk(clock=)`, `topk_radix.draft_topk(clock=)`; ddbench's build_tune and
  topk_tune write them as phases.csv).

Importing `ddtree_core` never imports this package; the dispatch in `ops` reaches it only for
impl="triton". On a machine without a GPU the kernels run under TRITON_INTERPRET=1.
"""
