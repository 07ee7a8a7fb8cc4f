"""The DDTREE speculative algorithm as a plugin for a stock SGLang 0.5.15 (no fork, no patched files).

DDTREE runs a DFlash drafter exactly as SGLang's DFLASH does, then grows a best-first tree over the
drafter's per-position top-K lists, verifies the whole tree in one target forward under a tree mask,
follows the target's own tokens through it and commits the accepted path.

- config.py: server-wide knobs (SGLANG_DDTREE_* variables) and per-request overrides
  (`sampling_params.custom_params`), pure Python;
- rounds.py: one round's tensors (verify tokens, positions, mask, committed path, stats rows),
  torch only;
- spec_algo.py: the algorithm object SGLang dispatches on, server-argument checks and resolution;
- info.py: the verify input and the batch result handed to SGLang;
- worker.py: the DDTree worker (a DFlashWorkerV2 whose decode round builds and verifies the tree);
- prometheus.py: DDTree histograms on /metrics (--enable-metrics);
- profile.py: per-stage time of the decode round (SGLANG_DDTREE_PROFILE_EVERY);
- draft_head.py: the draft side folded into the drafter's CUDA graph (the default at TP = 1;
  SGLANG_DDTREE_DRAFT_GRAPH=0 keeps it eager);
- plugin.py: `register()`, the entry point of group `sglang.srt.plugins`, and the hooks;
- window.py: the supported SGLang releases (0.5.15), checked before registering;
- finish.py: a stop accepted within max_new_tokens beats the cap (SGLang 0.5.15 checks the cap first);
- launch_server.py: `python -m ddtree_core.sglang.launch_server <sglang args>`.

Importing this package imports nothing from SGLang; config.py, rounds.py and finish.py never do.
"""
