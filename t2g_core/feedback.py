"""Load feedback from Parquet, JSONL, CSV or a Hugging Face ``datasets`` folder, validated like any artifact."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from t2g_core.schemas import FEEDBACK, SchemaError, validate_frame

OPTIONAL = ("critique", "reference", "tests", "entry_point", "meta")


def _read_jsonl(path: Path) -> pd.DataFrame:
    rows = []
    raw = path.read_bytes()
    for lineno, line in enumerate(raw.splitlines(), start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError(str(path), f"line {lineno} is not valid UTF-8 (byte {exc.start})") from exc
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemaError(str(path), f"line {lineno} is not valid JSON: {exc.msg} (column {exc.colno})") from exc
        if not isinstance(obj, dict):
            raise SchemaError(str(path), f"line {lineno} is not a JSON object")
        rows.append(obj)
    return pd.DataFrame(rows)


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""], encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaError(str(path), f"is not valid UTF-8 (byte {exc.start})") from exc


def _read_hf(path: Path) -> pd.DataFrame:
    import datasets  # heavy: only when needed

    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        ds = ds["train"] if "train" in ds else next(iter(ds.values()))
    return ds.to_pandas()


def _normalise(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for col in OPTIONAL:
        if col not in df.columns:
            df[col] = None
    if "meta" in df.columns:
        df["meta"] = [
            v if v is None or isinstance(v, str) or (isinstance(v, float) and pd.isna(v)) else json.dumps(v)
            for v in df["meta"]
        ]
    if "id" in df.columns:  # integer ids from CSV/JSON are fine as text
        df["id"] = [v if v is None or isinstance(v, str) else str(v) for v in df["id"]]
    return df


def load_feedback(path: str | Path) -> pd.DataFrame:
    """Read feedback from any supported format and validate it against the feedback schema."""
    p = Path(path)
    if not p.exists():
        raise SchemaError(str(p), "does not exist")
    if p.is_dir():
        if (p / "data.parquet").exists():
            p = p / "data.parquet"
        else:
            return validate_frame(_normalise(_read_hf(p)), FEEDBACK, str(p))
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        df = pd.read_parquet(p)
    elif suffix in (".jsonl", ".json"):
        df = _read_jsonl(p)
    elif suffix == ".csv":
        df = _read_csv(p)
    else:
        raise SchemaError(
            str(p), f"unsupported feedback format {suffix!r}: use .parquet, .jsonl, .csv or a datasets folder"
        )
    return validate_frame(_normalise(df), FEEDBACK, str(p))
