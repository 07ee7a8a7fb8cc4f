"""The README's tables, from the two runs' summary.csv files (run from this folder):

python tables.py
"""

import pandas as pd

pd.set_option("display.width", 200)


def setting(row) -> str:
    return row.method.upper() if row.method != "ddtree" else f"b{int(row.budget)}"


def campaign() -> None:
    s = pd.read_csv("../campaign-h200/summary.csv")
    print(f"campaign-h200: {(s.status == 'done').sum()} of {len(s)} cells done")
    s = s[s.status == "done"].copy()
    s["setting"] = s.apply(setting, axis=1)
    order = ["AR", "DFLASH", "b15", "b31", "b63"]
    for temperature in (0.0, 1.0):
        t = s[s.temperature == temperature]
        for value, digits in (("tokens_per_s", 0), ("acceptance_length", 2)):
            table = t.pivot_table(index=["dataset", "concurrency"], columns="setting", values=value)
            print(f"\nT={temperature:g} {value}")
            print(table.reindex(columns=order).round(digits).to_string())
    rows = []
    for (dataset, temperature, concurrency), g in s.groupby(["dataset", "temperature", "concurrency"]):
        g = g.set_index("setting")
        tree = g[g.method == "ddtree"].tokens_per_s
        rows.append({"dataset": dataset, "T": temperature, "conc": concurrency, "best DDTree": tree.idxmax(),
                     "vs DFLASH": tree.max() / g.loc["DFLASH", "tokens_per_s"],
                     "vs AR": tree.max() / g.loc["AR", "tokens_per_s"]})  # fmt: skip
    print("\nbest DDTree budget per cell (tokens/s) against DFLASH and AR")
    print(pd.DataFrame(rows).round(2).to_string(index=False))
    tau = s.pivot_table(index=["temperature", "dataset"], columns="setting", values="acceptance_length")
    for budget in ("b15", "b31", "b63"):
        tau[f"{budget}/DFLASH"] = tau[budget] / tau["DFLASH"]
    print("\ntau, mean over the four concurrencies, and DDTree / DFLASH")
    print(tau.round(2).to_string())
    speed = s.pivot_table(index=["dataset", "temperature", "concurrency"], columns="setting", values="tokens_per_s")
    tree = speed[["b15", "b31", "b63"]].max(axis=1)
    print(f"\nof {len(speed)} (dataset, T, concurrency) points: AR above DFLASH in {(speed.AR > speed.DFLASH).sum()}, "
          f"AR above the best DDTree in {(speed.AR > tree).sum()} (not in {list(speed[speed.AR <= tree].index)}), "
          f"the best DDTree above DFLASH in {(tree > speed.DFLASH).sum()}")  # fmt: skip
    spread = s.pivot_table(
        index=["dataset", "temperature", "setting"], columns="concurrency", values="acceptance_length"
    )
    spread = (spread.max(axis=1) - spread.min(axis=1)).max()
    print(f"largest tau spread over the four concurrencies of one setting: {spread:.3f}")
    both = speed.dropna(subset=["b63"])
    tau = s.pivot_table(index=["dataset", "temperature", "concurrency"], columns="setting", values="acceptance_length")
    tau = tau.loc[both.index]
    faster = list(both[both.b63 >= both.b31].index)
    print(f"points with b31 and b63: {len(both)}; b63 tau above b31 in {(tau.b63 > tau.b31).sum()}, b63 tokens/s "
          f"below b31 in {(both.b63 < both.b31).sum()}; b63 not below in {faster}")  # fmt: skip
    print("\nwall_s per cell by concurrency")
    print(s.groupby("concurrency").wall_s.describe()[["min", "50%", "max"]].round(2).to_string())


def knobs() -> None:
    s = pd.read_csv("knobs/summary.csv")
    print(f"\nknobs: {(s.status == 'done').sum()} of {len(s)} cells done; not done: "
          f"{', '.join(s[s.status != 'done'].cell_id)}")  # fmt: skip
    s = s[s.status == "done"].copy()
    print(s[s.method != "ddtree"][["cell_id", "tokens_per_s", "acceptance_length"]].round(2).to_string(index=False))
    d = s[s.method == "ddtree"].copy()
    d["depth"] = d.max_depth.map(lambda x: "auto" if pd.isna(x) else str(int(x)))
    d["chain"] = d.hold_chain.map({True: "held", False: "plain"})
    for value, digits in (("acceptance_length", 2), ("tokens_per_s", 0)):
        table = d.pivot_table(index=["dataset", "depth"], columns=["draft_temperature", "chain"], values=value)
        print(f"\nbudget 63, {value}")
        print(table.reindex(["auto", "3", "6", "10"], level=1).round(digits).to_string())
    by_depth = d.pivot_table(
        index=["dataset", "draft_temperature", "chain"], columns="depth", values="acceptance_length"
    )
    print("\ntau with a depth limit minus tau without (auto)")
    print(pd.DataFrame({f"d{x} - auto": by_depth[x] - by_depth["auto"] for x in ("3", "6", "10")}).round(3).to_string())
    held = d.pivot_table(index=["dataset", "depth", "draft_temperature"], columns="chain", values="acceptance_length")
    change = held["held"] - held["plain"]
    print(f"tau held - plain: {change.min():.3f} .. {change.max():.3f}")
    pairs = d.pivot_table(index=["dataset", "depth", "draft_temperature"], columns="chain",
                          values=["acceptance_length", "tokens_per_s"])  # fmt: skip
    same = pairs[(pairs["acceptance_length"]["held"] - pairs["acceptance_length"]["plain"]).abs() < 1e-12]
    ratio = same["tokens_per_s"]["held"] / same["tokens_per_s"]["plain"]
    print(f"\n{len(same)} held/plain pairs with equal tau: tokens/s held/plain {ratio.min():.2f} .. {ratio.max():.2f}")
    print(ratio.round(2).to_string())


def readme_tables() -> None:
    """The README's markdown: tokens/s (tau) per setting, and the knobs' tau."""
    s = pd.read_csv("../campaign-h200/summary.csv")
    s = s[s.status == "done"].copy()
    s["setting"] = s.apply(setting, axis=1)
    for temperature in (0.0, 1.0):
        print(f"\nT={temperature:g}: tokens/s (tau)\n")
        print("| dataset | conc | AR | DFLASH | DDTree b15 | b31 | b63 | best DDTree / DFLASH |")
        print("|---|---|---|---|---|---|---|---|")
        t = s[s.temperature == temperature]
        for (dataset, concurrency), g in t.groupby(["dataset", "concurrency"]):
            g = g.set_index("setting")
            cells = []
            for name in ("AR", "DFLASH", "b15", "b31", "b63"):
                if name not in g.index:
                    cells.append("-")
                elif name == "AR":
                    cells.append(f"{g.loc[name, 'tokens_per_s']:,.0f}")
                else:
                    cells.append(f"{g.loc[name, 'tokens_per_s']:,.0f} ({g.loc[name, 'acceptance_length']:.2f})")
            tree = g[g.method == "ddtree"].tokens_per_s
            ratio = tree.max() / g.loc["DFLASH", "tokens_per_s"]
            print(f"| {dataset} | {concurrency} | {' | '.join(cells)} | {tree.idxmax()} {ratio:.2f}x |")
    k = pd.read_csv("knobs/summary.csv")
    d = k[(k.status == "done") & (k.method == "ddtree")].copy()
    d["depth"] = d.max_depth.map(lambda x: "auto (15)" if pd.isna(x) else str(int(x)))
    print("\nknobs, budget 63: tau plain / held\n")
    print("| dataset | depth limit | drafter T 0.5 | 1 | 2 |")
    print("|---|---|---|---|---|")
    for dataset in ("gsm8k", "humaneval"):
        for depth in ("auto (15)", "3", "6", "10"):
            g = d[(d.dataset == dataset) & (d.depth == depth)]
            cells = []
            for temperature in (0.5, 1.0, 2.0):
                h = g[g.draft_temperature == temperature]
                plain, held = (
                    h[h.hold_chain.astype(str) == flag].acceptance_length.iloc[0] for flag in ("False", "True")
                )
                cells.append(f"{plain:.2f} / {held:.2f}")
            print(f"| {dataset} | {depth} | {' | '.join(cells)} |")


if __name__ == "__main__":
    campaign()
    knobs()
    readme_tables()
