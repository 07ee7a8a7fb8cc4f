"""Registers, spills and code size of the build kernel for an H200 (sm_90), compiled on the CPU (no GPU needed).

    python3 results/kernels/h200-2026-12-01d/ptxas_stats.py BUDGET 'launch;launch;...'

For kernel_bench's build (16 positions, an int budget, no held chain, PDL on) and each launch ('' the default;
key=value pairs of tree_build.LAUNCH_KEYS), compiles `_build_kernel` with Triton's bundled ptxas and prints its
registers per thread, spill bytes, shared memory, and the sizes of its PTX and of its SASS (cuobjdump).
"""

import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from ddbench.build_tune import FLAGS
from ddbench.kernel_bench import parse_launches
from ddtree_core.kernels import tree_build

POINTERS = {"lp_ptr": "*fp32", "ws_flt_ptr": "*fp32", "score_out": "*fp32", "pairs_ptr": "*i32", "row_end_ptr": "*i32",
            "ws_int_ptr": "*i32"}  # fmt: skip  (the rest: *i64, as kernel_bench's call passes them)
BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")


def compile_build(budget: int, launch: dict):
    pairs, _ = tree_build._pair_table(budget, budget, torch.device("cpu"))
    config = tree_build._launch_config(budget, pairs.numel(), False, launch, 16)
    warps = config.pop("num_warps")
    constants = config | {"PER_REQUEST_BUDGET": False, "HOLD": 0, "PROFILE": False, "PATHS": False, "PDL": True}
    kernel = tree_build._build_kernel
    signature = {}
    for param in kernel.params:
        name = param.name
        if param.is_constexpr:
            signature[name] = "constexpr"
            constants.setdefault(name, param.default)
        elif name.endswith(("_ptr", "_out")):
            signature[name] = POINTERS.get(name, "*i64")
        else:
            signature[name] = "i32"
    constants = {k: v for k, v in constants.items() if signature.get(k) == "constexpr"}
    source = ASTSource(kernel, signature, constants)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "launch_pdl": True})


def main(budget: str, text: str) -> None:
    for launch in [{}] + parse_launches(text, tree_build.LAUNCH_KEYS, FLAGS):
        compiled = compile_build(int(budget), launch)
        with tempfile.TemporaryDirectory() as tmp:
            ptx = os.path.join(tmp, "k.ptx")
            with open(ptx, "w") as stream:
                stream.write(compiled.asm["ptx"])
            info = subprocess.run([os.path.join(BIN, "ptxas"), "-v", "-arch=sm_90a", ptx, "-o", ptx + ".o"],
                                  capture_output=True, text=True, check=True).stderr  # fmt: skip
            sass = subprocess.run([os.path.join(BIN, "cuobjdump"), "-sass", ptx + ".o"], capture_output=True,
                                  text=True, check=True).stdout  # fmt: skip
        regs = re.search(r"Used (\d+) registers", info).group(1)
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", info).groups()
        instructions = sum(1 for line in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/", line))
        label = ",".join(f"{k}={v}" for k, v in launch.items()) or "default"
        print(f"N={budget} {label}: {regs} registers, spill stores/loads {spills[0]}/{spills[1]} bytes, shared "
              f"{compiled.metadata.shared} bytes, PTX {len(compiled.asm['ptx']) // 1024} KiB, "
              f"{instructions} SASS instructions", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
