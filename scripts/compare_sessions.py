"""The budget campaign's tokens/s against a same-session check of the same config, as markdown tables.

The campaign (results/sglang/campaign-h200) ran AR and DFLASH in one device session and DDTree b127 and b255
in a later one; the check (results/sglang/campaign-check-h200) ran AR, DFLASH, b127 and b255 in one session.
Printed: when each server's cells ran, tokens/s and tau of both runs per (dataset, T, concurrency), the ratio
check / campaign per setting, and the faster of b127 / b255 against DFLASH and AR in each run. Run from the
repository root:

    python scripts/compare_sessions.py
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

SETTINGS = ["AR", "DFLASH", "b127", "b255"]
POINT = ["dataset", "temperature", "concurrency"]


def markdown(frame: pd.DataFrame) -> str:
    """A markdown table of `frame`, its index as the first columns (pandas' to_markdown needs tabulate)."""
    frame = frame.reset_index()
    head = [" ".join(str(x) for x in c if x != "") if isinstance(c, tuple) else str(c) for c in frame.columns]
    rows = [[f"{v:g}" if isinstance(v, float) else str(v) for v in row] for row in frame.values]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in [head, ["---"] * len(head), *rows])


def setting(method: str, budget: float | str) -> str:
    """AR, DFLASH, b127; a budget column holding auto reads as strings ("127", "auto")."""
    if method != "ddtree":
        return method.upper()
    return "auto" if budget == "auto" else f"b{int(budget)}"


def load(folder: Path) -> pd.DataFrame:
    s = pd.read_csv(folder / "summary.csv")
    assert (s.status == "done").all(), f"{folder}: cells not done: {list(s.cell_id[s.status != 'done'])}"
    s["setting"] = [setting(m, b) for m, b in zip(s.method, s.budget)]
    return s


def windows(folder: Path) -> pd.DataFrame:
    """Cells, first cell start and last cell end (UTC) per server log, from the cells' completion records."""
    rows = []
    for path in sorted((folder / "cells").glob("*.json")):
        done = json.loads(path.read_text())
        cell, server = done["cell"], done["server"]
        rows.append({"setting": setting(cell["method"], cell["budget"]), "log": Path(server["log"]).name,
                     "start": server["started"], "end": server["finished"]})  # fmt: skip
    w = pd.DataFrame(rows).groupby(["setting", "log"])
    w = w.agg(cells=("start", "size"), first=("start", "min"), last=("end", "max")).sort_values("first")
    for column in ("first", "last"):
        w[column] = [time.strftime("%H:%M:%S", time.gmtime(t)) for t in w[column]]
    return w


def best_tree(speed: pd.DataFrame) -> pd.DataFrame:
    """Per point: the faster of b127 / b255 and its tokens/s over DFLASH's and AR's."""
    tree = speed[["b127", "b255"]]
    return pd.DataFrame({"best": tree.idxmax(axis=1), "vs DFLASH": tree.max(axis=1) / speed.DFLASH,
                         "vs AR": tree.max(axis=1) / speed.AR})  # fmt: skip


def gmean(frame: pd.DataFrame) -> pd.Series:
    return np.exp(np.log(frame).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaign", type=Path, default=Path("results/sglang/campaign-h200"))
    parser.add_argument("--check", type=Path, default=Path("results/sglang/campaign-check-h200"))
    args = parser.parse_args()
    folders = {"campaign": args.campaign, "check": args.check}
    runs = {k: load(folder) for k, folder in folders.items()}
    for k, folder in folders.items():
        w = windows(folder)
        print(f"\n{k}: cells per server log, first start and last end (UTC)\n")
        print(markdown(w[w.index.get_level_values("setting").isin(SETTINGS)]))

    def pivot(value: str) -> dict[str, pd.DataFrame]:
        return {k: s.pivot_table(index=POINT, columns="setting", values=value)[SETTINGS] for k, s in runs.items()}

    speed, tau = pivot("tokens_per_s"), pivot("acceptance_length")
    assert speed["campaign"].index.equals(speed["check"].index) and len(speed["check"]) == 24

    both = pd.concat({k: v.round(1) for k, v in speed.items()}, axis=1).swaplevel(axis=1)
    print("\ntokens/s, campaign and check\n")
    print(markdown(both[[(s, k) for s in SETTINGS for k in runs]]))

    tokens = pivot("completion_tokens")
    same = (tokens["check"] == tokens["campaign"]).xs((0.0, 1), level=["temperature", "concurrency"])
    print(f"\nT=0, 1 in flight: the same completion_tokens in both runs in {same.values.sum()} of {same.size} cells")
    ratio = speed["check"] / speed["campaign"]
    stats = {"geometric mean": gmean(ratio), "median": ratio.median(), "min": ratio.min(), "max": ratio.max(),
             "points check > campaign": (ratio > 1).sum()}  # fmt: skip
    print("\ntokens/s check / campaign over the 24 points\n")
    print(markdown(pd.DataFrame(stats).T.round(3)))
    for level, n in (("concurrency", 6), ("dataset", 8)):
        print(f"\ntokens/s check / campaign, geometric mean over the {n} points of each {level}\n")
        print(markdown(ratio.groupby(level).apply(gmean).round(3)))

    delta = (tau["check"] / tau["campaign"] - 1)[SETTINGS[1:]].groupby("temperature")
    stats = pd.concat({"min": delta.min(), "median": delta.median(), "max": delta.max()}, names=["stat"])
    print("\ntau (acceptance_length) check / campaign - 1, over the 12 points of each temperature\n")
    print(markdown(stats.round(4)))
    one = {s: tau["campaign"][s].round(2).astype(str) + " / " + tau["check"][s].round(2).astype(str)
           for s in SETTINGS[1:]}  # fmt: skip
    print("\ntau at 1 in flight, campaign / check\n")
    print(markdown(pd.DataFrame(one).xs(1, level="concurrency")))

    best = {k: best_tree(v) for k, v in speed.items()}
    both = pd.concat(best, axis=1).swaplevel(axis=1)
    print("\nthe faster of b127 / b255 against DFLASH and AR in each run (ratios of tokens/s)\n")
    print(markdown(both[[(c, k) for c in ("best", "vs DFLASH", "vs AR") for k in runs]].round(2)))
    print("\nthe faster of b127 / b255: geometric mean of its ratios, over the 24 points and per dataset\n")
    for k, b in best.items():
        ratios = b[["vs DFLASH", "vs AR"]]
        means = pd.concat([gmean(ratios).to_frame("all").T, ratios.groupby("dataset").apply(gmean)])
        print(markdown(means.round(3).rename_axis(k)), end="\n\n")

    full = runs["campaign"].pivot_table(index=POINT, columns="setting", values="tokens_per_s")
    any_budget = full.drop(columns=["AR", "DFLASH"]).max(axis=1)
    print("\nwins out of 24 points (tokens/s)\n")
    print("| DDTree | run | beats DFLASH | beats AR |\n| --- | --- | --- | --- |")
    print(f"| any budget 15..1023 | campaign | {(any_budget > full.DFLASH).sum()} | {(any_budget > full.AR).sum()} |")
    for k, b in best.items():
        print(f"| b127 or b255 | {k} | {(b['vs DFLASH'] > 1).sum()} | {(b['vs AR'] > 1).sum()} |")
    wins = pd.concat(
        {(c, k): (b[c] > 1).groupby("concurrency").sum() for c in ("vs DFLASH", "vs AR") for k, b in best.items()},
        axis=1,
    )
    print("\nwins of b127 / b255 out of the 6 (dataset, T) points of each concurrency\n")
    print(markdown(wins))
    for k, v in speed.items():
        fastest = v.assign(DDTree=v[["b127", "b255"]].max(axis=1))[["AR", "DFLASH", "DDTree"]].idxmax(axis=1)
        print(f"\n{k}: the fastest of AR, DFLASH and b127 / b255 at", fastest.value_counts().to_dict(), "points")
    for column in ("vs DFLASH", "vs AR"):
        won = {k: b[column] > 1 for k, b in best.items()}
        for a, b in (("campaign", "check"), ("check", "campaign")):
            points = [f"{d} T={t:g} c={c}" for d, t, c in won[a][won[a] & ~won[b]].index]
            print(f"\n{column}: a win in the {a} alone at {len(points)} points", *points, sep="\n- ")


if __name__ == "__main__":
    main()
