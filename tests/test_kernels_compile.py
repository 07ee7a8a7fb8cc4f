"""The CUDA-only branches of the Triton kernels (inline PTX: the fast exp, the profiling clocks; launches
too large for the interpreter's tests) compile for Hopper and Blackwell: Triton's compiler and ptxas run
without a GPU, so a kernel that would fail on the device fails here first. The compiles run in a child
process, since the test session imports the kernels under the interpreter (conftest.py)."""

import inspect
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

ARCHS = [90, 100]  # H100 / H200, B200 / RTX PRO 6000 class (sm_120 shares ptxas-blackwell)


def compile_for(kernel, arch: int, pointers: dict[str, str], constexprs: dict, warps: int = 4, registers=None):
    """triton.compile of `kernel` for sm_`arch`: pointers maps pointer parameters to Triton types, the
    constexprs their values (parameters with defaults keep them), every other parameter is an int32 scalar;
    registers: a cap per thread (maxnreg)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    parameters = inspect.signature(kernel.fn).parameters
    names = list(parameters)
    defaults = {n: p.default for n, p in parameters.items() if p.default is not inspect.Parameter.empty}
    constexprs = {n: v for n, v in defaults.items() if n not in pointers} | constexprs  # as a launch leaves them
    signature = {n: pointers.get(n, "constexpr" if n in constexprs else "i32") for n in names}
    source = ASTSource(kernel, signature, constexprs={(names.index(k),): v for k, v in constexprs.items()})
    options = {"num_warps": warps} | ({"maxnreg": registers} if registers else {})
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def registers_used(compiled) -> int:
    """The registers per thread of a compiled kernel, by the cuobjdump that ships with Triton."""
    import re
    import tempfile

    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([tool, "--dump-resource-usage", cubin.name], capture_output=True, text=True, check=True)
    return int(re.search(r"REG:(\d+)", usage.stdout).group(1))


def profiled_build(arch: int) -> None:
    from ddtree_core.kernels import tree_build

    pointers = {"lp_ptr": "*fp32", "ids_ptr": "*i64", "budget_ptr": "*i64", "hold_ptr": "*i1", "pairs_ptr": "*i32",
                "row_end_ptr": "*i32", "ws_int_ptr": "*i32", "ws_flt_ptr": "*fp32", "tok_out": "*i64",
                "par_out": "*i64", "dep_out": "*i64", "cnt_out": "*i64", "score_out": "*fp32", "rank_out": "*i64",
                "clock_ptr": "*i64", "path_ptr": "*i32"}  # fmt: skip
    launch = tree_build._launch_config(256, 1570, False)
    warps = launch.pop("num_warps")
    launch.pop("SPLIT")  # a host-side choice: the two kernels are the STAGE values below
    compiled = compile_for(tree_build._build_kernel, arch, pointers, launch | {"HOLD": 0, "PROFILE": True, "PDL": True},
                           warps)  # fmt: skip
    ptx = compiled.asm["ptx"]
    assert "%globaltimer" in ptx and "%clock64" in ptx
    assert "griddepcontrol.launch_dependents" in ptx and "griddepcontrol.wait" in ptx  # pdl.py
    counting = compile_for(tree_build._build_kernel, arch, pointers,
                           launch | {"HOLD": 1, "SORT_RANKS": False, "PRE_BOUND": True, "TAILS": False,
                                     "SORTED_BOUND": True}, warps)  # fmt: skip
    assert counting.asm["cubin"]
    fine = compile_for(tree_build._build_kernel, arch, pointers,
                       launch | {"HOLD": 0, "FINE_BITS": 0, "SORT_SURVIVORS": False, "FCH": 0, "TAILS": False}, warps)
    assert fine.asm["cubin"]  # the former defaults: no sort of the survivors or the final pool
    ahead = compile_for(tree_build._build_kernel, arch, pointers,
                        launch | {"HOLD": 2, "AHEAD": 8, "TAILS": False}, warps)  # fmt: skip
    assert ahead.asm["cubin"]  # the look-ahead bound
    for stage in (1, 2):  # SPLIT's kernels: the tails build alone, the level build of the rows it left
        split = compile_for(tree_build._build_kernel, arch, pointers,
                            launch | {"HOLD": 0, "PDL": True, "STAGE": stage, "TAILS": stage == 1}, warps)
        assert "griddepcontrol.wait" in split.asm["ptx"]


# the radix selection kernel's pointer parameters, as a bf16 launch passes them
SELECT_POINTERS = {"logits_ptr": "*bf16", "group_ptr": "*i32", "super_ptr": "*i32", "list_ptr": "*i32",
                   "stat_ptr": "*fp32", "cand_ptr": "*i64", "lp_out": "*fp32", "ids_out": "*i64", "clock_ptr": "*i64",
                   "seg_ptr": "*i64", "count_ptr": "*i32", "floor_ptr": "*i32", "settled_ptr": "*i32"}
SCAN_POINTERS = {"logits_ptr": "*bf16", "group_ptr": "*i32", "super_ptr": "*i32", "stat_ptr": "*fp32"}
EMIT_POINTERS = {"logits_ptr": "*bf16", "group_ptr": "*i32", "seg_ptr": "*i64", "count_ptr": "*i32",
                 "floor_ptr": "*i32"}


def radix_topk(arch: int) -> None:
    from ddtree_core.kernels import topk_radix

    scan = compile_for(
        topk_radix._scan_kernel, arch, SCAN_POINTERS, {"TILE": 2048, "G": 32, "S": 4, "DIVIDE": False, "FAST": True}
    )
    assert "ex2.approx.ftz.f32" in scan.asm["ptx"]
    # the tiles' candidates at one request's K = 256
    emit = {"TILE": 2048, "G": 32, "EMIT": 14, "NG": 16, "CAP": 64, "DIVIDE": False, "PDL": True}
    assert "griddepcontrol.wait" in compile_for(topk_radix._emit_kernel, arch, EMIT_POINTERS, emit, warps=1).asm["ptx"]
    union = compile_for(
        topk_radix._select_kernel, arch, SELECT_POINTERS,
        {"G": 32, "S": 4, "GATHER": 8192, "CP": 32, "GBLOCK": 1024, "SBLOCK": 1024, "LBLOCK": 1024, "CBLOCK": 512,
         "LOG_BINS": 6, "KP": 256, "DIVIDE": False, "EMIT": True, "CAP": 64, "TP": 128, "TB": 32, "UBLOCK": 2048,
         "PROFILE": True}, warps=8,
    )  # fmt: skip
    assert union.asm["cubin"]
    select = compile_for(
        topk_radix._select_kernel, arch, SELECT_POINTERS,
        {"G": 32, "S": 4, "GATHER": 8192, "CP": 128, "GBLOCK": 8192, "SBLOCK": 2048, "LBLOCK": 1024, "CBLOCK": 512,
         "LOG_BINS": 8, "KP": 256, "DIVIDE": False, "PROFILE": True}, warps=8,
    )  # fmt: skip
    assert "%globaltimer" in select.asm["ptx"] and select.asm["cubin"]
    tiled = compile_for(
        topk_radix._select_kernel, arch, SELECT_POINTERS,
        {"G": 32, "S": 4, "GATHER": 8192, "CP": 128, "GBLOCK": 1024, "SBLOCK": 1024, "LBLOCK": 1024, "CBLOCK": 512,
         "LOG_BINS": 6, "KP": 256, "DIVIDE": False, "TILED": True}, warps=8,
    )  # fmt: skip
    assert tiled.asm["cubin"]  # the read-back as [groups, G] tiles, at one request's K = 256
    # the register cap (draft_topk's select_registers) reaches ptxas: the default launch at 64 requests,
    # K = 64 needs more than 64 registers a thread, capped it uses 64
    launch = (SELECT_POINTERS,
              {"G": 64, "S": 8, "GATHER": 1024, "CP": 4, "GBLOCK": 1024, "SBLOCK": 512, "LBLOCK": 512, "CBLOCK": 256,
               "LOG_BINS": 6, "KP": 64, "DIVIDE": False})  # fmt: skip
    free = registers_used(compile_for(topk_radix._select_kernel, arch, *launch))
    capped = registers_used(compile_for(topk_radix._select_kernel, arch, *launch, registers=64))
    assert free > 64 and capped == 64, (free, capped)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", ["profiled_build", "radix_topk"])
def test_compiles_for_the_gpu(case, arch):
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    done = subprocess.run([sys.executable, __file__, case, str(arch)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


if __name__ == "__main__":
    globals()[sys.argv[1]](int(sys.argv[2]))
