"""Any dataset without an adapter, through a column mapping: ``t2g ingest --dataset ID --columns prompt=q,response=a``.

``ID`` is a Hub dataset id (offline: from the local cache) or a local JSON / JSONL, Parquet or CSV file or folder.
The dataset is *streamed*: only the first ``limit`` rows and the mapped columns are read. Mappable: ``prompt`` and
``response`` (required), ``id`` (else ``<name>-<row>``), ``critique``, ``reference``, ``tests``, ``entry_point``;
``task`` comes from ``data.task``.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from t2g_core.config.data import check_columns
from t2g_core.ingest.base import IngestError
from t2g_core.schemas import FEEDBACK, validate_frame

FILE_LOADERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def parse_columns(spec: str) -> dict[str, str]:
    """``"prompt=question,response=answer"`` -> ``{"prompt": "question", "response": "answer"}``."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        target, sep, column = part.partition("=")
        if not sep or not target.strip() or not column.strip():
            raise ValueError(f"--columns {spec!r}: {part!r} is not FEEDBACK_COLUMN=DATASET_COLUMN")
        out[target.strip()] = column.strip()
    check_columns(out)
    return out


def stream(dataset: str, split: str, columns: Mapping[str, str], limit: int | None) -> Iterable[dict[str, Any]]:
    """The rows of ``dataset``'s ``split`` as a stream, cut to ``limit`` rows and the mapped columns."""
    import datasets

    path = Path(dataset)
    try:
        if path.is_file():
            if path.suffix not in FILE_LOADERS:
                raise IngestError(dataset, f"unsupported format {path.suffix!r}; use {', '.join(FILE_LOADERS)}")
            ds = datasets.load_dataset(
                FILE_LOADERS[path.suffix], data_files={split: str(path)}, split=split, streaming=True
            )
        else:
            ds = datasets.load_dataset(str(path) if path.is_dir() else dataset, split=split, streaming=True)
    except IngestError:
        raise
    except Exception as exc:  # offline and not cached, no such split, unreadable files: one line saying which
        raise IngestError(dataset, f"could not be read ({type(exc).__name__}: {str(exc).splitlines()[0]})") from exc
    present = list(ds.column_names or [])
    absent = [c for c in dict.fromkeys(columns.values()) if present and c not in present]
    if absent:
        raise IngestError(
            dataset, f"has no column {', '.join(absent)} (its columns: {', '.join(present)})", column=absent[0]
        )
    if present:
        ds = ds.select_columns(list(dict.fromkeys(columns.values())))
    # islice, not ds.take: take fetches the record batch after the last row it needs (maybe from the next shard)
    return itertools.islice(ds, limit) if limit is not None else ds


def _text(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, default=str) if isinstance(value, (list, dict)) else str(value)


def mapped_feedback(
    dataset: str, columns: Mapping[str, str], *, task: str, split: str | None = None, limit: int | None = None
) -> pd.DataFrame:
    """Feedback rows from ``dataset`` through ``columns`` (feedback column -> dataset column), validated."""
    check_columns(columns)
    split = split or "train"
    name = re.sub(r"[^\w.-]+", "-", Path(dataset).stem if Path(dataset).exists() else dataset).strip("-")
    rows = []
    try:
        for i, record in enumerate(stream(dataset, split, columns, limit)):
            missing = [c for c in columns.values() if c not in record]
            if missing:
                raise IngestError(dataset, f"row {i} lacks column {missing[0]}", column=missing[0], row=i)
            row = {target: _text(record[source]) for target, source in columns.items()}
            row["id"] = str(row["id"]) if row.get("id") is not None else f"{name}-{i}"
            row |= {"task": task, "meta": json.dumps({"source": dataset, "split": split, "row": i})}
            rows.append(row)
    except IngestError:
        raise
    except Exception as exc:  # a corrupt file met while streaming
        raise IngestError(dataset, f"could not be read ({type(exc).__name__}: {str(exc).splitlines()[0]})") from exc
    if not rows:
        raise IngestError(dataset, f"no rows in split {split!r}")
    df = pd.DataFrame(rows)
    for col in FEEDBACK.names:
        if col not in df.columns:
            df[col] = None
    return validate_frame(df[list(FEEDBACK.names)], FEEDBACK, f"{dataset}:{split}")
