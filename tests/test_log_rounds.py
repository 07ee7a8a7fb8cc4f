"""scripts/log_rounds.py: round times from SGLang's decode log lines, and --pure's prefill-free intervals."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "log_rounds.py"
spec = importlib.util.spec_from_file_location("log_rounds", SCRIPT)
log_rounds = importlib.util.module_from_spec(spec)
spec.loader.exec_module(log_rounds)

PREFILL = "[t] Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 152, token usage: 0.01, #running-req: 0\n"


def decode(running: int, accept: float, tps: float) -> str:
    return (f"[t] Decode batch, #running-req: {running}, #token: 262, token usage: 0.01, accept len: {accept:.2f}, "
            f"accept rate: 0.07, cuda graph: True, gen throughput (token/s): {tps:.2f}, #queue-req: 0\n")  # fmt: skip


def test_pure_keeps_only_the_intervals_without_a_prefill(tmp_path):
    log = tmp_path / "server.log"
    # a prefill, then 3 decode intervals (the first holds the prefill), another prefill, one more interval, and
    # a line after an idle gap (below 100 tok/s)
    log.write_text(PREFILL + decode(1, 2.0, 250) + decode(1, 3.0, 500) + decode(1, 2.5, 400) + PREFILL
                   + decode(1, 2.0, 200) + decode(1, 2.0, 50))  # fmt: skip
    every = log_rounds.rounds(log)
    assert [(r, tau, round(ms, 3)) for r, tau, ms in every] == [(1, 2.0, 8.0), (1, 3.0, 6.0), (1, 2.5, 6.25),
                                                                (1, 2.0, 10.0)]  # fmt: skip
    assert [round(ms, 3) for _, _, ms in log_rounds.rounds(log, pure=True)] == [6.0, 6.25]


def test_ar_lines_count_one_token_a_round_and_the_summary_reads_pure(tmp_path, capsys):
    log = tmp_path / "ar.log"
    line = "[t] Decode batch, #running-req: 4, #token: 9, cuda graph: True, gen throughput (token/s): {}\n"
    log.write_text(PREFILL + line.format(800.0) + line.format(1000.0) + line.format(500.0))
    assert [ms for _, _, ms in log_rounds.rounds(log, pure=True)] == [4.0, 8.0]
    log_rounds.main(["--pure", "--summary", "4", str(log)])
    assert "| ar.log | 6.00 (" in capsys.readouterr().out
