"""Round times from SGLang's own decode log lines (server logs, plain or .gz).

    python scripts/log_rounds.py results/sglang/h200-2026-11-29b/trace/trace-*.log.gz
    python scripts/log_rounds.py --summary 1,16 results/sglang/h200-2026-11-30/rounds/rounds-*.log.gz

With --summary R1,R2,..: per log, the median ms per round over the lines with exactly R running
requests (and the interquartile range and line count); lines above 20 ms (a prefill or a CUDA-graph
capture inside the interval) are left out, or above MS with --max-ms MS (an 8B target's rounds at 16
running take more than 20 ms):

    python scripts/log_rounds.py --max-ms 200 --summary 1,16 results/sglang/testbed8b-h200-2026-12-02/logs/*

Every `Decode batch` line reports the running requests, the mean accept length (tokens per round,
bonus included; absent for AR, which emits one token a step) and the generation throughput over the
interval since the previous line. ms per round = 1000 x running x accept_len / throughput: the time
of one scheduler round at that batch size, untouched by any client. Lines with throughput below
100 tok/s (the first after an idle gap) are left out.

With --pure only intervals without a `Prefill batch` line since the previous decode line count: a logged
interval also holds the prefills and request boundaries inside it, and a method that emits more tokens a round
spreads the same per-request cost over fewer rounds (at one request in flight, a 128-token answer is one or two
intervals). Pure intervals are the scheduler's decode rounds alone:

    python scripts/log_rounds.py --pure --max-ms 200 --summary 1,4 results/sglang/testbed8b-h200-2026-12-02b/logs/d*
"""

import argparse
import gzip
import re
import statistics
import sys
from pathlib import Path

LINE = re.compile(
    r"Decode batch, #running-req: (\d+).*?(?:accept len: ([\d.]+).*?)?gen throughput \(token/s\): ([\d.]+)"
)


def rounds(path: Path, pure: bool = False) -> list[tuple[int, float, float]]:
    """(running, accept len, ms per round) of each decode line; pure: only lines with no prefill line before
    them since the previous decode line."""
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    prefilled = True  # the first decode line's interval is unknown
    with opener(path, "rt") as f:
        for line in f:
            if "Prefill batch" in line:
                prefilled = True
            match = LINE.search(line)
            if not match:
                continue
            if float(match[3]) >= 100 and not (pure and prefilled):
                running, tau, tps = int(match[1]), float(match[2] or 1), float(match[3])
                out.append((running, tau, 1e3 * running * tau / tps))
            prefilled = False
    return out


def summary(paths: list[str], running: list[int], max_ms: float = 20.0, pure: bool = False) -> None:
    print("| log | " + " | ".join(f"ms per round, {r} running: median (IQR, lines)" for r in running) + " |")
    print("|---|" + "---|" * len(running))
    for name in paths:
        lines = rounds(Path(name), pure)
        cells = []
        for count in running:
            ms = sorted(m for r, _, m in lines if r == count and m <= max_ms)
            if len(ms) < 2:
                cells.append("-" if not ms else f"{ms[0]:.2f} (n=1)")
                continue
            low, _, high = statistics.quantiles(ms, n=4)
            cells.append(f"{statistics.median(ms):.2f} ({low:.2f}-{high:.2f}, n={len(ms)})")
        print(f"| {Path(name).name} | " + " | ".join(cells) + " |")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", help="SGLang server logs (plain or .gz)")
    parser.add_argument("--summary", help="R1,R2,..: per log, the median ms per round at R running")
    parser.add_argument("--max-ms", type=float, default=20.0, help="leave out intervals above this (default 20)")
    parser.add_argument("--pure", action="store_true", help="only intervals without a prefill inside")
    args = parser.parse_args(argv)
    if args.summary:
        summary(args.logs, [int(r) for r in args.summary.split(",")], args.max_ms, args.pure)
        return
    print("| log | running | accept len | ms per round |")
    print("|---|---|---|---|")
    for name in args.logs:
        for running, tau, ms in rounds(Path(name), args.pure):
            print(f"| {Path(name).name} | {running} | {tau:.2f} | {ms:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
