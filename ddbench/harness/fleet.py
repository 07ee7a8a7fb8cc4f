"""Running servers as a sweep uses them (`ddbench sweep --url`): which URLs serve which cells.

`Fleet.connect` probes every URL (ddbench.harness.remote) and refuses, as one line naming the URL, a server
that does not answer, is no SGLang-compatible `/generate` server, or serves another method than its
label says; it also refuses a fleet whose servers run different engines, targets, drafters or drafter
blocks, since their cells would not be comparable. `Fleet.pools` then gives each pending cell its pool:
the servers of the cell's method that can serve it (remote.RemoteServer.refusal: a DDTREE server serves
every budget up to its own, through per-request custom_params) and, among DDTREE servers, only the
narrowest of them: a server verifies at its own width (budget + 1), so a budget-15 cell sent to a
budget-255 server would measure that server's rounds, not budget 15's. A cell of budget `auto` goes to the
widest of them instead, whose budget its rounds choose under (as a sweep's own servers are started with its
largest budget). The pool's servers share the cell's requests round robin; a router URL is one server here.
A cell no server can serve is refused before any cell runs. ddbench never starts, stops or reconfigures
these servers.

Example: --url ar=http://a:30000,dflash=http://b:30000,http://c:30000,http://d:30000 where c and d report
DDTREE with ddtree_budget 32 and 64: an AR cell's pool is (a), a DDTree b16 or b32 cell's (c), the
narrower of the two (with a second budget-32 server e: (c, e)), a b64 cell's (d) alone; a b128 cell is
refused: "no URL serves gsm8k__ddtree-b128-dauto-dt1__t0__c1 (http://c:30000: budget 128 > 32;
http://d:30000: budget 128 > 64)"; where c and d are reference servers, an auto cell's pool is (d).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ddbench.config import AUTO_BUDGET, Cell, DDBenchError, ServerURL, SweepConfig
from ddbench.harness.remote import RemoteServer, down, probe


@dataclass(frozen=True)
class Pool:
    """The running servers of one method that share a cell's requests, round robin."""

    servers: tuple[RemoteServer, ...]

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(server.url for server in self.servers)

    @property
    def method(self) -> str:
        return self.servers[0].method

    @property
    def block_size(self) -> int | None:
        return self.servers[0].block_size  # one block in a fleet (Fleet.connect)

    @property
    def label(self) -> str:
        return f"{self.method} at {', '.join(self.urls)}"

    def down(self, api_key: str | None) -> str | None:
        """Why one of the servers is not serving, or None while all are."""
        for url in self.urls:
            if reason := down(url, api_key):
                return reason
        return None


@dataclass(frozen=True)
class Fleet:
    """The running servers of a sweep, as they described themselves."""

    servers: tuple[RemoteServer, ...]

    @classmethod
    def connect(cls, urls: Sequence[ServerURL], api_key: str | None) -> Fleet:
        """Probe every URL (side by side) and check that they measure one model pair; DDBenchError if not."""
        with ThreadPoolExecutor(max_workers=len(urls)) as pool:
            servers = tuple(pool.map(lambda url: probe(url, api_key), urls))
        speculative = [server for server in servers if server.method != "ar"]
        _same(servers, "engine", "engines")
        _same(servers, "model", "targets")
        _same(speculative, "draft", "drafters")
        _same(speculative, "block_size", "drafter blocks")
        return cls(servers)

    @property
    def engine(self) -> str:
        return self.servers[0].engine

    @property
    def model(self) -> str:
        return self.servers[0].model

    @property
    def draft(self) -> str:
        return next((server.draft or "" for server in self.servers if server.method != "ar"), "")

    def check(self, config: SweepConfig) -> None:
        """DDBenchError if `config` says another engine than the servers run."""
        if config.engine != self.engine:
            raise DDBenchError(f"engine is {config.engine}, but {self.servers[0].url} runs {self.engine}")

    def pools(self, cells: Sequence[Cell]) -> dict[Cell, Pool]:
        """Each cell's pool; DDBenchError for the first cell no server serves, saying why, e.g. "no URL serves
        dflash, which gsm8k__dflash__t0__c1 needs" or "no URL serves gsm8k__ddtree-b64-dauto-dt1__t0__c1
        (http://c:30000: budget 64 > 32)"."""
        unable = [cell for cell in cells if not self._able(cell)]
        if unable:
            cell, more = unable[0], f"; {len(unable) - 1} more cell(s) have none either" if len(unable) > 1 else ""
            kind = [server for server in self.servers if server.method == cell.method]
            if not kind:
                raise DDBenchError(f"no URL serves {cell.method}, which {cell.cell_id} needs{more}")
            why = "; ".join(f"{server.url}: {server.refusal(cell)}" for server in kind)
            raise DDBenchError(f"no URL serves {cell.cell_id} ({why}){more}")
        return {cell: Pool(self._able(cell)) for cell in cells}

    def _able(self, cell: Cell) -> tuple[RemoteServer, ...]:
        """The servers that serve `cell`; for a DDTree cell only those of the smallest width among them (of the
        largest for budget auto)."""
        able = [server for server in self.servers if server.refusal(cell) is None]
        if cell.method == "ddtree" and able:
            pick = max if cell.budget == AUTO_BUDGET else min
            width = pick(server.max_budget for server in able)
            able = [server for server in able if server.max_budget == width]
        return tuple(able)

    def to_manifest(self) -> list[dict[str, Any]]:
        return [server.to_dict() for server in self.servers]


def _same(servers: Sequence[RemoteServer], attribute: str, what: str) -> None:
    """DDBenchError if `servers` differ in `attribute`, naming two that do."""
    for server in servers[1:]:
        first, other = getattr(servers[0], attribute), getattr(server, attribute)
        if other != first:
            raise DDBenchError(f"the URLs serve different {what}: {servers[0].url} {first}, {server.url} {other}")
