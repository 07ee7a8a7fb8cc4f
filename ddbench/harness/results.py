"""The results folder of a sweep: what is on disk, written atomically, and read back.

    OUT/
      manifest.json            full config + environment stamp (+ every earlier run's stamp), datasets and
                               whether each one's prompts were all held out (ddbench.heldout); with --url
                               the running servers as they described themselves (ddbench.harness.remote)
      cells/<cell_id>.jsonl    one RequestRecord per request of a finished cell
      cells/<cell_id>.json     the cell's completion record (written last: its presence = done), with
                               held_out: whether all its prompts were held out from drafter training
      cells/<cell_id>.failure.json   the error of a failed cell (removed when a rerun finishes it)
      logs/<server>.log        server logs (and .pid while the server runs)
      requests.jsonl           every finished cell's records, merged
      summary.csv              one row per cell (ddbench.harness.report.summarize)
      summary_repeats.csv      with repeats: one row per setting over them (ddbench.harness.report.summarize_repeats)

Every file is written to a temporary name and renamed into place, so a crash never leaves a half file
and a rerun sees a cell either finished or not. Report, plot and compare read only this folder; they also
read a folder archived with `gzip cells/*.jsonl requests.jsonl` (a rerun into it would write plain files).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddbench.config import Cell, DDBenchError, cell_repeat, ddtree_hold_chain


@dataclass(frozen=True)
class RequestRecord:
    """One request (one turn of one prompt) of one cell, as measured by the client."""

    cell_id: str
    dataset: str
    method: str  # ar | dflash | ddtree
    budget: int | str | None  # an int, or "auto" (config.AUTO_BUDGET); None for ar and dflash
    max_depth: int | None
    draft_temperature: float | None
    temperature: float
    concurrency: int
    prompt_index: int  # index of the prompt in the dataset's selected subset
    turn: int  # 0-based turn of a multi-turn prompt
    prompt_hash: str  # sha1 of the prompt token ids (matches requests across harnesses)
    prompt_tokens: int
    completion_tokens: int
    output_ids: tuple[int, ...]  # generated token ids
    text: str
    finish_reason: str | None
    latency_s: float  # client-side end-to-end latency
    ttft_s: float | None  # time to the first streamed token (streaming only)
    itl_s: tuple[float, ...]  # gaps between streamed chunks (streaming only; a chunk may hold several tokens)
    start_s: float  # request start, seconds after the cell started
    meta_info: dict[str, Any]  # the server's meta_info: spec_* fields and DDTree extras
    hold_chain: bool | None = None  # DDTree: trees held the rank-0 chain first (False if absent); None: ar, dflash
    repeat: int = 1  # the cell's repeat (1 if absent)
    server_url: str | None = None  # the server that answered (several can share a cell); None: stored before

    def __post_init__(self) -> None:
        object.__setattr__(self, "hold_chain", ddtree_hold_chain(self.method, self.hold_chain))
        object.__setattr__(self, "repeat", cell_repeat(self.repeat))

    @property
    def cell(self) -> Cell:
        return Cell.from_dict(dataclasses.asdict(self))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["output_ids"] = list(self.output_ids)
        data["itl_s"] = list(self.itl_s)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        missing = names - set(data) - {"hold_chain", "repeat", "server_url"}  # written before these: defaults
        if missing:
            raise ValueError(f"request record lacks {', '.join(sorted(missing))}")
        values = {name: data.get(name) for name in names}
        values["output_ids"] = tuple(int(token) for token in data["output_ids"])
        values["itl_s"] = tuple(float(gap) for gap in data["itl_s"])
        return cls(**values)


@dataclass(frozen=True)
class CellResult:
    """A cell as found on disk: finished (records, wall time), failed (error) or pending."""

    cell: Cell
    status: str  # done | failed | pending
    records: tuple[RequestRecord, ...]
    wall_s: float | None  # wall time of the measured requests (done cells)
    error: str | None  # failed cells
    server: dict[str, Any] = dataclasses.field(default_factory=dict)  # done cells: label, log, block_size,
    # server_started, started, finished (epoch seconds: server launch, the cell's start and end); on running
    # servers label, urls, block_size, started, finished
    held_out: bool | None = None  # done cells: every prompt was held out from drafter training (ddbench.heldout);
    # None: not done, or stored before the flag


def prompt_hash(token_ids: Sequence[int]) -> str:
    """sha1 over the prompt's token ids; equal prompts give equal hashes in every harness."""
    return hashlib.sha1(",".join(str(int(token)) for token in token_ids).encode()).hexdigest()[:16]


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.chmod(temporary, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    write_atomic(path, "".join(json.dumps(row) + "\n" for row in rows))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file, or of its gzipped copy `<path>.gz` (archived results folders)."""
    packed = path.with_name(path.name + ".gz")
    if not path.exists() and packed.exists():
        with gzip.open(packed, "rt") as stream:
            return [json.loads(line) for line in stream if line.strip()]
    if not path.exists():
        raise DDBenchError(f"{path} is missing (neither it nor {packed.name} exists)")
    with open(path) as stream:
        return [json.loads(line) for line in stream if line.strip()]


@dataclass(frozen=True)
class RunFolder:
    """Paths inside one sweep's output folder."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def cells(self) -> Path:
        return self.root / "cells"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def requests(self) -> Path:
        return self.root / "requests.jsonl"

    @property
    def summary(self) -> Path:
        return self.root / "summary.csv"

    @property
    def summary_repeats(self) -> Path:
        return self.root / "summary_repeats.csv"

    def records_path(self, cell: Cell) -> Path:
        return self.cells / f"{cell.cell_id}.jsonl"

    def done_path(self, cell: Cell) -> Path:
        return self.cells / f"{cell.cell_id}.json"

    def failure_path(self, cell: Cell) -> Path:
        return self.cells / f"{cell.cell_id}.failure.json"

    def is_done(self, cell: Cell) -> bool:
        return self.done_path(cell).exists()

    def write_cell(
        self, cell: Cell, records: Sequence[RequestRecord], wall_s: float, server: dict, held_out: bool | None = None
    ) -> None:
        """Store a finished cell: records first, then the completion record that marks it done."""
        write_jsonl(self.records_path(cell), (record.to_dict() for record in records))
        done = {"cell": cell.to_dict(), "wall_s": wall_s, "server": server, "held_out": held_out}
        write_json(self.done_path(cell), done)
        self.failure_path(cell).unlink(missing_ok=True)

    def write_failure(self, cell: Cell, error: str, log: str | None) -> None:
        write_json(self.failure_path(cell), {"cell": cell.to_dict(), "error": error, "server_log": log})

    def read_manifest(self) -> dict[str, Any]:
        if not self.manifest.exists():
            raise DDBenchError(f"{self.root} is not a ddbench results folder (no manifest.json)")
        try:
            return json.loads(self.manifest.read_text())
        except json.JSONDecodeError as error:
            raise DDBenchError(f"{self.manifest}: malformed JSON ({error})") from error

    def read_cell(self, cell: Cell) -> CellResult:
        if self.is_done(cell):
            done = json.loads(self.done_path(cell).read_text())
            records = tuple(RequestRecord.from_dict(row) for row in read_jsonl(self.records_path(cell)))
            server, held_out = done.get("server") or {}, done.get("held_out")
            return CellResult(cell, "done", records, float(done["wall_s"]), None, server, held_out)
        if self.failure_path(cell).exists():
            failure = json.loads(self.failure_path(cell).read_text())
            return CellResult(cell, "failed", (), None, failure["error"])
        return CellResult(cell, "pending", (), None, None)


def find_run_folder(path: str | Path) -> RunFolder:
    """The results folder `path` names: the folder itself or any file directly inside it."""
    path = Path(path)
    folder = RunFolder(path if path.is_dir() else path.parent)
    if not folder.manifest.exists():
        raise DDBenchError(f"{path} is not a ddbench results folder (no manifest.json)")
    return folder


def load_cells(folder: RunFolder) -> list[CellResult]:
    """Every cell of the manifest's grid, in grid order, with what the folder holds for it."""
    manifest = folder.read_manifest()
    try:
        cells = [Cell.from_dict(data) for data in manifest["cells"]]
        return [folder.read_cell(cell) for cell in cells]
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as error:
        raise DDBenchError(f"{folder.root}: malformed results ({error})") from error


def merge_requests(folder: RunFolder, cells: Sequence[CellResult]) -> None:
    """Rewrite requests.jsonl from every finished cell (a superset of what an earlier run wrote)."""
    write_jsonl(folder.requests, (record.to_dict() for result in cells for record in result.records))
