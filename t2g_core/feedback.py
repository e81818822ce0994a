"""Load feedback from Parquet, JSONL, CSV or a Hugging Face ``datasets`` folder, validated like any artifact, and
split it into the pipeline's training and held-out prompts (:func:`split_prompts`).

Every problem is one :class:`SchemaError` naming the file, row and column; a JSONL line over :data:`MAX_LINE_BYTES`
is read no further. Text that is not valid Unicode (a lone surrogate) is refused, not cleaned: every later stage and
cache key trusts the feedback, so it is fixed at its source.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import BinaryIO

import pandas as pd

from t2g_core.config.data import HoldoutConfig
from t2g_core.schemas import FEEDBACK, NOT_UNICODE, SchemaError, surrogate_in, validate_frame

OPTIONAL = ("critique", "reference", "tests", "entry_point", "meta")
FORMATS = ".parquet, .jsonl, .csv or a datasets folder"
MAX_LINE_BYTES = 16 << 20  # one JSONL row, its newline included (a 1 GB line took 3.24 GB to refuse)


def _read_jsonl(path: Path) -> pd.DataFrame:
    rows, broken = [], []  # broken: (row, line, surrogate) of rows holding lone surrogates
    with open(path, "rb") as f:
        for lineno, obj, found in _jsonl_records(path, f):
            if found:
                broken.append((len(rows), lineno, found))
            rows.append(obj)
    if broken:
        raise _surrogate_error(path, *broken[0], count=len(broken))
    return pd.DataFrame(rows)


def _surrogate_error(path: Path, row: int, lineno: int, found: tuple, count: int | None = None) -> SchemaError:
    """The error for a row holding a lone surrogate; ``count``: how many rows of the file hold one (None: unknown,
    the file is read in pieces and stops at the first)."""
    where, at, code = found
    column, _, inner = where.partition(".")
    detail = f" ({inner})" if inner else ""
    of_file = f"; {count} row(s) of the file hold one" if count is not None else ""
    return SchemaError(
        str(path),
        f"holds a lone surrogate {code} at character {at}{detail} (line {lineno}{of_file}): {NOT_UNICODE}",
        column=column.split("[")[0].removesuffix(" (a key)"),
        row=row,
    )


def _jsonl_records(path: Path, f: BinaryIO) -> Iterator[tuple[int, dict, tuple | None]]:
    """(line number, JSON object, its first lone surrogate or None) of each non-blank line of ``f``, read as it
    streams by; a line longer than ``MAX_LINE_BYTES`` is an error read no further than that."""
    for lineno, line in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), start=1):
        if len(line) > MAX_LINE_BYTES:
            raise SchemaError(str(path), f"line {lineno} is longer than {MAX_LINE_BYTES:,} bytes, the limit of a row")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError(str(path), f"line {lineno} is not valid UTF-8 (byte {exc.start})") from exc
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
            found = surrogate_in(obj)  # walks the value: as deep as the decoder went
        except json.JSONDecodeError as exc:
            raise SchemaError(str(path), f"line {lineno} is not valid JSON: {exc.msg} (column {exc.colno})") from exc
        except RecursionError:
            raise SchemaError(str(path), f"line {lineno} nests arrays or objects too deeply to read") from None
        if not isinstance(obj, dict):
            raise SchemaError(str(path), f"line {lineno} is not a JSON object")
        yield lineno, obj, found


_CSV_OPTIONS = {"dtype": str, "keep_default_na": False, "na_values": [""], "encoding": "utf-8"}


@contextlib.contextmanager
def _csv_errors(path: Path) -> Iterator[None]:
    """pandas' CSV errors as a SchemaError naming ``path`` (a whole read or one in pieces)."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise SchemaError(str(path), f"is not valid UTF-8 (byte {exc.start})") from exc
    except pd.errors.EmptyDataError:
        raise SchemaError(str(path), "is empty (no header, no rows)") from None
    except pd.errors.ParserError as exc:
        raise SchemaError(str(path), f"is not valid CSV: {' '.join(str(exc).split())[:200]}") from None


def _read_csv(path: Path) -> pd.DataFrame:
    with _csv_errors(path):
        return pd.read_csv(path, **_CSV_OPTIONS)


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise SchemaError(str(path), f"cannot be read as Parquet: {' '.join(str(exc).split())[:200]}") from None


def _read_hf(path: Path) -> pd.DataFrame:
    import datasets  # heavy: only when needed

    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        ds = ds["train"] if "train" in ds else next(iter(ds.values()))
    return ds.to_pandas()


def _normalise(df: pd.DataFrame, file: str) -> pd.DataFrame:
    df = df.copy()
    for col in OPTIONAL:
        if col not in df.columns:
            df[col] = None
    if "meta" in df.columns:
        df["meta"] = [_meta_text(v, file, row) for row, v in enumerate(df["meta"])]
    if "id" in df.columns:  # integer ids from CSV/JSON become text, explicitly; anything else is refused
        df["id"] = [_id_text(v) for v in df["id"]]
    return df


def _meta_text(value: object, file: str, row: int) -> object:
    """A ``meta`` object as JSON text (a string, or a missing value, as it is); one that JSON cannot hold (bytes, a
    date, an array from a Parquet struct) names its row."""
    if value is None or isinstance(value, str) or (isinstance(value, float) and pd.isna(value)):
        return value
    try:
        return json.dumps(value, allow_nan=False, default=_plain)
    except (TypeError, ValueError, RecursionError) as exc:
        raise SchemaError(file, f"cannot be stored as JSON: {exc}", column="meta", row=row) from None


def _plain(value: object) -> object:
    """numpy arrays and scalars (how Parquet and datasets hand back nested values) as lists and numbers."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _id_text(value: object) -> object:
    """An integer id as its decimal text; everything else unchanged (validation then names what is wrong)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) or (hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "iu"):
        return str(int(value))
    return value


def load_feedback(path: str | Path) -> pd.DataFrame:
    """Read feedback from any supported format and validate it against the feedback schema."""
    p = Path(path)
    if not p.exists():
        raise SchemaError(str(p), "does not exist")
    if p.is_dir():
        if (p / "data.parquet").exists():
            p = p / "data.parquet"
        else:
            return validate_frame(_normalise(_read_hf(p), str(p)), FEEDBACK, str(p))
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        df = _read_parquet(p)
    elif suffix in (".jsonl", ".json"):
        df = _read_jsonl(p)
    elif suffix == ".csv":
        df = _read_csv(p)
    else:
        raise SchemaError(str(p), f"unsupported feedback format {suffix!r}: use {FORMATS}")
    return validate_frame(_normalise(df, str(p)), FEEDBACK, str(p))


def iter_feedback(path: str | Path, rows: int = 10_000) -> Iterator[pd.DataFrame]:
    """The feedback in ``path`` as validated frames of at most ``rows`` rows, read piece by piece, so a file far
    larger than memory is checked in about the memory of one piece. Errors name the row counted from the file's
    start; ids are unique across the whole file. A ``datasets`` folder is read whole."""
    p = Path(path)
    if not p.exists():
        raise SchemaError(str(p), "does not exist")
    if p.is_dir() and not (p / "data.parquet").exists():
        yield load_feedback(p)
        return
    p = p / "data.parquet" if p.is_dir() else p
    ids: dict[str, int] = {}  # id -> the row that holds it first
    offset = 0
    for chunk in _pieces(p, rows):
        try:
            df = validate_frame(_normalise(chunk, str(p)), FEEDBACK, str(p))
        except SchemaError as exc:
            raise SchemaError(
                exc.file, exc.message, exc.column, None if exc.row is None else exc.row + offset
            ) from None
        again = next((i for i, v in enumerate(df["id"]) if v in ids), None)
        if again is not None:
            first = ids[df["id"].iloc[again]]
            raise SchemaError(str(p), f"duplicate id: the same as row {first}", column="id", row=offset + again)
        ids.update((v, offset + i) for i, v in enumerate(df["id"]))
        offset += len(df)
        yield df


def _pieces(p: Path, rows: int) -> Iterator[pd.DataFrame]:
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            batches = pq.ParquetFile(p).iter_batches(batch_size=rows)
            yield from (batch.to_pandas() for batch in batches)
        except (OSError, ValueError) as exc:
            raise SchemaError(str(p), f"cannot be read as Parquet: {' '.join(str(exc).split())[:200]}") from None
    elif suffix in (".jsonl", ".json"):
        with open(p, "rb") as f:
            records, done = _jsonl_records(p, f), 0
            while piece := list(islice(records, rows)):
                for row, (lineno, _, found) in enumerate(piece, start=done):
                    if found:
                        raise _surrogate_error(p, row, lineno, found)
                done += len(piece)
                yield pd.DataFrame([obj for _, obj, _ in piece])
    elif suffix == ".csv":
        with _csv_errors(p):
            yield from pd.read_csv(p, chunksize=rows, **_CSV_OPTIONS)
    else:
        raise SchemaError(str(p), f"unsupported feedback format {suffix!r}: use {FORMATS}")


def responses_frame(entries: Iterable[tuple[dict, str, str, object]], where: str) -> pd.DataFrame:
    """New responses to feedback items' prompts as feedback rows (schema FEEDBACK, validated): each ``(item, id,
    response, meta)`` keeps the item's prompt, task, reference, tests and entry point, takes the new id, response and
    meta (a dict is stored as JSON), and has no critique. ``where`` names the rows in a validation error."""
    items = []
    for item, item_id, response, meta in entries:
        row = {name: item.get(name) for name in FEEDBACK.names}
        meta = json.dumps(meta) if isinstance(meta, dict) else meta
        items.append(row | {"id": item_id, "response": response, "critique": None, "meta": meta})
    return validate_frame(pd.DataFrame(items, columns=FEEDBACK.names), FEEDBACK, where)


def split_prompts(feedback: pd.DataFrame, holdout: HoldoutConfig) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The pipeline's deterministic train / held-out split of the feedback rows: PPO, the warm-up and the policy
    samples see the first part only, the evaluation scores the second (None when ``holdout`` holds out no row)."""
    shuffled = feedback.sample(frac=1.0, random_state=holdout.seed).reset_index(drop=True)
    n_eval = int(round(len(shuffled) * holdout.eval_fraction))
    if n_eval == 0:
        return shuffled, None
    return shuffled.iloc[n_eval:].reset_index(drop=True), shuffled.iloc[:n_eval].reset_index(drop=True)


def sampled_from(frame: pd.DataFrame) -> pd.Series:
    """The id of the feedback item each policy-sample row was sampled from."""
    return frame["meta"].map(lambda m: json.loads(m)["sampled_from"])
