"""Dataset adapters: public datasets in their own published format -> the ``feedback`` schema.

Each adapter names the fields it needs; a record that lacks one gets an error listing the expected fields.
Records come from local files in the dataset's own format (JSONL, JSON, Parquet, a ``datasets`` folder) or,
when the Hugging Face Hub is reachable, from the Hub id.
"""

from __future__ import annotations

from t2g_core.ingest.base import ADAPTERS, Adapter, IngestError, ingest, read_records

__all__ = ["ADAPTERS", "Adapter", "IngestError", "ingest", "read_records"]

# adapters register themselves on import
from t2g_core.ingest import code, qa, summarization  # noqa: E402,F401
