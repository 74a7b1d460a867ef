"""The database seam: remit's tables beside DBOS's, on SQLite or Postgres."""

from remit.store.database import Database, normalize_url, portable_serializer

__all__ = ["Database", "normalize_url", "portable_serializer"]
