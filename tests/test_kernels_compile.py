"""The CUDA-only branches of the Triton kernels (inline PTX: the fast exp, the profiling clocks; launches
too large for the interpreter's tests) compile for Hopper and Blackwell: Triton's compiler and ptxas run
without a GPU, so a kernel that would fail on the device fails here first. The compiles run in a child
process, since the test session imports the kernels under the interpreter (conftest.py).

The users' GPU, the RTX PRO 6000, is sm_120 (consumer Blackwell): 99 KB of shared memory per block, not
sm_100's 227. `default_launches` records every kernel launch a serving round makes, as the dispatchers
choose it (ddtree_core.sglang.rounds with impl="triton", on a device of that GPU's 188 SMs), without
running it, then compiles each for the architecture and checks its shared memory against the limit: in CI
one round (batch 1, budget 64, vocab 152,064); with -m slow the grid of batches 1 / 8 / 64, budgets
16 / 64 / 256 / 1,024 and vocabularies 32,000 / 152,064, with and without per-request settings."""

import contextlib
import inspect
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

ARCHS = [90, 100, 120]  # H100 / H200, B200, RTX PRO 6000 (consumer Blackwell)
SHARED_LIMIT = {90: 227 * 1024, 100: 227 * 1024, 120: 99 * 1024}  # bytes of shared memory a block may use
SMS = {90: 132, 100: 148, 120: 188}  # SMs of the H200, B200 and RTX PRO 6000 (launch choices depend on them)


def compile_for(kernel, arch: int, pointers: dict[str, str], constexprs: dict, warps: int = 4, registers=None):
    """triton.compile of `kernel` for sm_`arch`: pointers maps pointer parameters to Triton types, the
    constexprs their values (parameters with defaults keep them), every other parameter is an int32 scalar;
    registers: a cap per thread (maxnreg)."""
    parameters = inspect.signature(kernel.fn).parameters
    defaults = {n: p.default for n, p in parameters.items() if p.default is not inspect.Parameter.empty}
    constexprs = {n: v for n, v in defaults.items() if n not in pointers} | constexprs  # as a launch leaves them
    signature = {n: pointers.get(n, "constexpr" if n in constexprs else "i32") for n in parameters}
    options = {"num_warps": warps} | ({"maxnreg": registers} if registers else {})
    return _compile(kernel, signature, constexprs, arch, options)


def _compile(kernel, signature: dict[str, str], constexprs: dict, arch: int, options: dict):
    """triton.compile of `kernel` with this signature (parameter -> Triton type or "constexpr") for sm_`arch`."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(signature)
    source = ASTSource(kernel, signature, constexprs={(names.index(k),): v for k, v in constexprs.items()})
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
    compiled = compile_for(tree_build._build_kernel, arch, pointers, launch | {"HOLD": 0, "PROFILE": True, "PDL": True},
                           warps)  # fmt: skip
    ptx = compiled.asm["ptx"]
    assert "%globaltimer" in ptx and "%clock64" in ptx
    assert "griddepcontrol.launch_dependents" in ptx and "griddepcontrol.wait" in ptx  # pdl.py
    counting = compile_for(tree_build._build_kernel, arch, pointers,
                           launch | {"HOLD": 1, "SORT_RANKS": False, "TAILS": False}, warps)  # fmt: skip
    assert counting.asm["cubin"]
    fine = compile_for(tree_build._build_kernel, arch, pointers,
                       launch | {"HOLD": 0, "FINE_BITS": 0, "SORT_SURVIVORS": False, "FCH": 0, "TAILS": False}, warps)
    assert fine.asm["cubin"]  # the former defaults: no sort of the survivors or the final pool
    held = compile_for(tree_build._build_kernel, arch, pointers, launch | {"HOLD": 2, "PATHS": True}, warps)
    assert held.asm["cubin"]  # per-request holds, the paths written


TYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "int64": "i64", "int32": "i32", "int16": "i16",
         "int8": "i8", "uint8": "u8", "bool": "i1"}
CUDA_PATH = {"DIVIDE": False, "FAST": True, "PDL": True}  # what a launch on a CUDA device of sm_90+ passes


@contextlib.contextmanager
def recorded_launches(sms: int):
    """A context in which every Triton launch is recorded as (kernel, args, kwargs) instead of run, and
    launch choices see `sms` SMs. Outputs stay uninitialised: only shapes reach the launches (no host sync)."""
    from triton.runtime.jit import JITFunction

    from ddtree_core.kernels import topk_radix

    launches = []
    run, count = JITFunction.run, topk_radix._sms
    JITFunction.run = lambda self, *args, grid, warmup, **kwargs: launches.append((self, args, kwargs))
    topk_radix._sms = lambda device: sms
    try:
        yield launches
    finally:
        JITFunction.run, topk_radix._sms = run, count


def compile_launch(kernel, args, kwargs, arch: int):
    """triton.compile of a recorded launch for sm_`arch`: tensors as pointers of their dtype, Python ints,
    floats and bools as i32 (i64 when larger) / fp32 / i1, constexprs as passed (defaults where not), with
    CUDA_PATH's values where the CPU launch passed the interpreter's."""
    import torch

    positional, signature, constexprs = iter(args), {}, {}
    for param in kernel.params:
        if param.name in kwargs:
            value = kwargs[param.name]
        elif param.is_constexpr and param.has_default:
            value = param.default
        else:
            value = next(positional)
        if param.is_constexpr:
            constexprs[param.name] = CUDA_PATH.get(param.name, value)
            signature[param.name] = "constexpr"
        elif isinstance(value, torch.Tensor):
            signature[param.name] = "*" + TYPES[str(value.dtype).removeprefix("torch.")]
        elif isinstance(value, bool):
            signature[param.name] = "i1"
        elif isinstance(value, int):
            signature[param.name] = "i32" if -(2**31) <= value < 2**31 else "i64"
        else:
            signature[param.name] = "fp32"
    options = {key: kwargs[key] for key in ("num_warps", "maxnreg") if key in kwargs}
    return _compile(kernel, signature, constexprs, arch, options), constexprs, options


def round_launches(sms: int, batch: int, budget: int, vocab: int, per_request: bool) -> list:
    """The launches of one serving round of a block-16 drafter at `budget` (ddtree_core.sglang.rounds):
    the draft block's inputs, the top-K and tree, the verify inputs, the round's tail and the KV move."""
    import torch

    from ddtree_core.kernels import kv_move
    from ddtree_core.settings import TreeSettings
    from ddtree_core.sglang import rounds
    from ddtree_core.sglang.config import ServerSettings

    server = ServerSettings(block_size=16, tree=TreeSettings(budget, 15, 1.0))
    width, depth = server.verify_width, server.tree_depth
    limits = None
    if per_request:
        request = TreeSettings(budget=budget // 2, max_depth=7, draft_temperature=0.7, hold_chain=True)
        limits = rounds.staged_limits([request] * batch, pin=False)
    prefix = torch.full((batch,), 100, dtype=torch.int64)
    cache_loc = torch.zeros(batch, width, dtype=torch.int64)
    with recorded_launches(sms) as launches:
        rounds.draft_block_inputs(prefix, prefix, torch.arange(batch), torch.zeros(batch, 4096, dtype=torch.int32),
                                  block=16, width=width, mask_token_id=0, impl="triton")  # fmt: skip
        logits = torch.zeros(batch, depth, vocab, dtype=torch.bfloat16)
        topk, tree = rounds.draft_tree(logits, server, limits, impl="triton")
        rounds.verify_batch(tree, prefix, prefix, int(prefix.sum()), impl="triton")
        target = torch.zeros(batch, width, dtype=torch.int64)
        _, path, _ = rounds.round_tail(tree, target, topk, prefix, cache_loc=cache_loc, impl="triton")
        kv_move.move_path_kv(torch.zeros(64, dtype=torch.int64), torch.full((64,), 2048, dtype=torch.int64), 2048,
                             path.kv_dst, path.kv_src, path.commit_lens)  # fmt: skip
    return launches


def default_launches(arch: int, grid: str = "one") -> None:
    """Compile every launch of the rounds of `grid` ("one" or "all", the module docstring) for sm_`arch` and
    check each kernel's shared memory against the architecture's limit; print one line per distinct launch."""
    shapes = [(1, 64, 152064, False)]
    if grid == "all":
        shapes = [(b, n, v, r) for n in (16, 64, 256, 1024) for v in (32000, 152064) for b in (1, 8, 64)
                  for r in (False, True) if not r or b == 8]  # fmt: skip
    seen, over = set(), []
    for batch, budget, vocab, per_request in shapes:
        for kernel, args, kwargs in round_launches(SMS[arch], batch, budget, vocab, per_request):
            compiled, constexprs, options = compile_launch(kernel, args, kwargs, arch)
            key = (kernel.fn.__name__, tuple(sorted(constexprs.items())), tuple(sorted(options.items())))
            if key in seen:
                continue
            seen.add(key)
            shared = compiled.metadata.shared
            print(f"sm_{arch} {kernel.fn.__name__} batch {batch} budget {budget} vocab {vocab} per-request "
                  f"{per_request}: shared {shared} B, registers {registers_used(compiled)}", flush=True)
            if shared > SHARED_LIMIT[arch]:
                over.append(f"{kernel.fn.__name__} (batch {batch}, budget {budget}, vocab {vocab}): {shared} B")
    assert seen and not over, f"over sm_{arch}'s {SHARED_LIMIT[arch]} B of shared memory: {over}"


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


def child(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    return subprocess.run([sys.executable, __file__, *argv], env=env, capture_output=True, text=True)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", ["profiled_build", "radix_topk"])
def test_compiles_for_the_gpu(case, arch):
    done = child(case, str(arch))
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_round_compiles_for_the_users_gpu_within_its_shared_memory():
    done = child("default_launches", "120", "one")
    assert done.returncode == 0, done.stderr[-3000:]
    kernels = {line.split()[1] for line in done.stdout.splitlines()}
    assert {"_scan_kernel", "_select_kernel", "_build_kernel", "_verify_kernel", "_round_tail_kernel"} <= kernels


@pytest.mark.slow
@pytest.mark.parametrize("arch", [120])
def test_every_default_launch_fits_the_users_gpu(arch):
    done = child("default_launches", str(arch), "all")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


if __name__ == "__main__":
    globals()[sys.argv[1]](*(int(arg) if arg.isdigit() else arg for arg in sys.argv[2:]))
