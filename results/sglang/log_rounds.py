"""Round times from SGLang's own decode log lines (server logs, plain or .gz).

    python results/sglang/log_rounds.py results/sglang/h200-2026-11-29b/trace/trace-*.log.gz

Every `Decode batch` line reports the running requests, the mean accept length (tokens per round,
bonus included; absent for AR, which emits one token a step) and the generation throughput over the
interval since the previous line. ms per round = 1000 x running x accept_len / throughput: the time
of one scheduler round at that batch size, untouched by any client. Lines with throughput below
100 tok/s (the first after an idle gap) are left out.
"""

import gzip
import re
import sys
from pathlib import Path

LINE = re.compile(
    r"Decode batch, #running-req: (\d+).*?(?:accept len: ([\d.]+).*?)?gen throughput \(token/s\): ([\d.]+)"
)


def rounds(path: Path) -> list[tuple[int, float, float]]:
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    with opener(path, "rt") as f:
        for line in f:
            match = LINE.search(line)
            if match and float(match[3]) >= 100:
                running, tau, tps = int(match[1]), float(match[2] or 1), float(match[3])
                out.append((running, tau, 1e3 * running * tau / tps))
    return out


def main(paths: list[str]) -> None:
    print("| log | running | accept len | ms per round |")
    print("|---|---|---|---|")
    for name in paths:
        for running, tau, ms in rounds(Path(name)):
            print(f"| {Path(name).name} | {running} | {tau:.2f} | {ms:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
