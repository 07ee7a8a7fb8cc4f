"""DDTREE through SGLang's own machinery, in a process of its own (needs SGLang).

The `sglang.srt.plugins` entry point that pyproject.toml declares, found by SGLang's load_plugins(),
registers the algorithm and applies every hook through HookRegistry; SGLang's ServerArgs then resolves
`--speculative-algorithm DDTREE` from a command line (tiny configs on disk, no weights, no GPU).
"""

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("sglang.srt.plugins")

REPO = Path(__file__).resolve().parents[1]
DRAFT = REPO / "ddbench" / "assets" / "SmolLM2-135M-Instruct-DFlash-b16"  # its config: block 16
TARGET = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
    "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16",
}  # fmt: skip

CODE = """
import json
import os
import sys

from sglang.srt.managers.schedule_batch import Req
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
from sglang.srt.server_args import prepare_server_args
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from ddtree_core.sglang import plugin
from ddtree_core.sglang.compat import resolved
from ddtree_core.sglang.finish import length_first
from ddtree_core.sglang.spec_algo import settings_of

target, draft, out = sys.argv[1:]
load_plugins()
targets = [plugin.MASK_POLICY, plugin.DUMMY_VERIFY_INPUT, plugin.VALIDATE_REQUEST, plugin.ROUND_PROCESSED,
           plugin.SPEC_METRICS, plugin.INIT_INFO] + ([plugin.FINISH_STATE] if length_first(Req) else [])
result = {
    "algorithm": type(SpeculativeAlgorithm.from_string("DDTREE")).__name__,
    "unpatched": [name for name in targets if name not in HookRegistry._patched],
}
for case, flags, budget in (("default", [], None), ("budget 63", [], "63"),
                            ("fa3", ["--attention-backend", "fa3"], None)):
    os.environ.pop("SGLANG_DDTREE_BUDGET", None)
    if budget is not None:
        os.environ["SGLANG_DDTREE_BUDGET"] = budget
    try:
        args = prepare_server_args(["--model-path", target, "--speculative-algorithm", "DDTREE",
                                    "--speculative-draft-model-path", draft, "--attention-backend", "triton",
                                    "--device", "cuda", "--skip-tokenizer-init", *flags])
        getattr(args, "resolve_once", lambda: None)()  # SGLang >= 0.5.19 resolves on demand
        settings, view = settings_of(args), resolved(args)  # as resolution decided (0.5.23: declarations)
        result[case] = [view.speculative_dflash_block_size, view.speculative_num_draft_tokens, settings.tree.budget]
    except Exception as error:
        result[case] = f"{type(error).__name__}: {error}"
with open(out, "w") as f:
    json.dump(result, f)
"""


@pytest.fixture(scope="module")
def resolved(tmp_path_factory):
    """What the subprocess found, with the entry point as pyproject.toml declares it (a dist-info on its path)."""
    tmp = tmp_path_factory.mktemp("load_plugins")
    entry_points = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    dist = tmp / "site" / "ddtree-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ddtree\nVersion: 0.0\n")
    lines = [f"{name} = {value}" for name, value in entry_points["sglang.srt.plugins"].items()]
    (dist / "entry_points.txt").write_text("\n".join(["[sglang.srt.plugins]", *lines, ""]))
    (tmp / "target").mkdir()
    (tmp / "target" / "config.json").write_text(json.dumps(TARGET))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp / "site"), *sys.path]), "SGLANG_PLUGINS": "ddtree"}
    command = [sys.executable, "-c", textwrap.dedent(CODE), str(tmp / "target"), str(DRAFT), str(tmp / "out.json")]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((tmp / "out.json").read_text())


@pytest.mark.slow  # imports SGLang
def test_load_plugins_registers_ddtree_and_its_hooks(resolved):
    assert resolved["algorithm"] == "DDTreeSpecAlgo"
    assert resolved["unpatched"] == []


@pytest.mark.slow
def test_server_args_resolve_ddtree(resolved):
    """Block from the drafter's config, verify width = budget + 1, unsupported backends refused."""
    assert resolved["default"] == [16, 16, 15]
    assert resolved["budget 63"] == [16, 64, 63]
    assert "DDTREE does not support" in resolved["fa3"] and "'fa3'" in resolved["fa3"]
