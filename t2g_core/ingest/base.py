"""The adapter protocol, record reading and the ``ingest`` entry point."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from t2g_core.schemas import FEEDBACK, SchemaError, validate_frame


class IngestError(SchemaError):
    """A dataset record does not have the fields its adapter expects."""


@dataclass(frozen=True)
class Adapter:
    """How one public dataset maps to feedback rows."""

    name: str
    hub_id: str | None
    default_split: str
    required: tuple[str, ...]  # fields every record must have
    convert: Callable[[dict[str, Any], int], list[dict[str, Any]]]  # (record, row index) -> feedback rows
    description: str
    # how to read the published data when no path is given
    load_hub: Callable[[str], Iterable[dict[str, Any]]] | None = None

    def check(self, record: dict[str, Any], row: int, file: str) -> None:
        missing = [f for f in self.required if f not in record]
        if missing:
            raise IngestError(
                file,
                f"{self.name} record lacks field(s) {', '.join(missing)}; expected fields: {', '.join(self.required)} "
                f"(found: {', '.join(sorted(record)) or 'none'})",
                column=missing[0],
                row=row,
            )


ADAPTERS: dict[str, Adapter] = {}


def register(adapter: Adapter) -> Adapter:
    ADAPTERS[adapter.name] = adapter
    return adapter


def _read_json_file(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        return _loads(path, text)
    return [_loads(path, line, lineno) for lineno, line in enumerate(text.splitlines(), start=1) if line.strip()]


def _loads(path: Path, text: str, lineno: int = 1) -> Any:
    """``text``, which starts on line ``lineno`` of ``path``, decoded; bad JSON is an IngestError naming the line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise IngestError(str(path), f"line {lineno + exc.lineno - 1} is not valid JSON: {exc.msg}") from exc
    except RecursionError:  # deeper than Python's stack
        raise IngestError(str(path), f"line {lineno} nests arrays or objects too deeply to read") from None


def _split_file(folder: Path, split: str) -> Path | None:
    for pattern in (f"{split}.*", f"{split}-*.*", f"*{split}*.jsonl", f"*{split}*.parquet", f"*{split}*.json"):
        hits = sorted(p for p in folder.glob(pattern) if p.suffix in (".jsonl", ".json", ".parquet"))
        if hits:
            return hits[0]
    return None


def read_records(path: str | Path, split: str) -> list[dict[str, Any]]:
    """Records from a file, a folder of per-split files, or a ``datasets.save_to_disk`` folder."""
    p = Path(path)
    if not p.exists():
        raise IngestError(str(p), "does not exist")
    if p.is_dir():
        if (p / "dataset_dict.json").exists() or (p / "dataset_info.json").exists():
            import datasets

            ds = datasets.load_from_disk(str(p))
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise IngestError(str(p), f"has no split {split!r}; splits: {', '.join(ds)}")
                ds = ds[split]
            return ds.to_list()
        found = _split_file(p, split)
        if found is None:
            raise IngestError(str(p), f"holds no file for split {split!r} (looked for {split}.jsonl/.json/.parquet)")
        p = found
    if p.suffix == ".parquet":
        return pd.read_parquet(p).to_dict(orient="records")
    if p.suffix in (".jsonl", ".json"):
        return _read_json_file(p)
    raise IngestError(str(p), f"unsupported format {p.suffix!r}: use .jsonl, .json, .parquet or a datasets folder")


def _hub_records(adapter: Adapter, split: str) -> list[dict[str, Any]]:
    if adapter.load_hub is not None:
        return list(adapter.load_hub(split))
    if adapter.hub_id is None:
        raise IngestError(adapter.name, "has no Hub id: pass a local path")
    import datasets

    try:
        return datasets.load_dataset(adapter.hub_id, split=split).to_list()
    except Exception as exc:  # offline, gated or renamed on the Hub: say what to do instead
        raise IngestError(
            adapter.hub_id,
            f"could not be loaded from the Hub ({type(exc).__name__}: {exc}); pass --path to local files",
        ) from exc


def ingest(
    dataset: str, path: str | Path | None = None, split: str | None = None, limit: int | None = None
) -> pd.DataFrame:
    """Read ``dataset`` (adapter name) from ``path`` or the Hub and return validated feedback rows."""
    if dataset not in ADAPTERS:
        raise IngestError(dataset, f"unknown dataset; known: {', '.join(sorted(ADAPTERS))}")
    adapter = ADAPTERS[dataset]
    split = split or adapter.default_split
    records = read_records(path, split) if path is not None else _hub_records(adapter, split)
    source = str(path) if path is not None else f"{adapter.hub_id}:{split}"
    rows: list[dict[str, Any]] = []
    for i, record in enumerate(records):
        if limit is not None and len(rows) >= limit:
            break
        adapter.check(record, i, source)
        rows.extend(adapter.convert(record, i))
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        raise IngestError(source, f"no {dataset} records found in split {split!r}")
    df = pd.DataFrame(rows)
    for col in FEEDBACK.names:
        if col not in df.columns:
            df[col] = None
    return validate_frame(df, FEEDBACK, source)


def meta_json(**fields: Any) -> str:
    return json.dumps({k: v for k, v in fields.items() if v is not None}, default=str, sort_keys=True)
