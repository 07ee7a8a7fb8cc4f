"""`python -m ddtree_core.sglang.launch_server <sglang launch_server args>`: SGLang's server with DDTREE.

Works without the package's entry point being installed. SGLang starts its scheduler processes with
multiprocessing's spawn method; a spawned child imports the parent's `-m` main module as `__mp_main__`
before it unpickles its work, so the module-level `register()` below runs in every scheduler process
too (SGLang's own `load_plugins()` there finds the algorithm registered and does nothing more for it).
That is why this must stay a module run with -m and not a package `__main__`: spawn does not re-import
a main module named `__main__`.

DDTree settings come from the environment (SGLANG_DDTREE_BUDGET, SGLANG_DDTREE_MAX_DEPTH,
SGLANG_DDTREE_DRAFT_TEMPERATURE; see config.py), which the scheduler processes inherit. On an SGLang
release outside the plugin's supported window it exits with status 1 after one line (window.py).
"""

from __future__ import annotations

import os
import sys

from ddtree_core.sglang.plugin import register

if not register():  # an SGLang release outside the supported window: the log has the one-line reason
    raise SystemExit(1)


def main(argv: list[str] | None = None) -> None:
    """Mirror `python -m sglang.launch_server`: load plugins, parse the arguments, serve."""
    from sglang.launch_server import run_server
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    load_plugins()  # other installed plugins; DDTREE is already registered above
    server_args = prepare_server_args(sys.argv[1:] if argv is None else argv)
    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


if __name__ == "__main__":
    main()
