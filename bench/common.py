"""What the benchmarks share: throwaway databases and the sections of BENCHMARKS.md."""

from __future__ import annotations

import argparse
import os
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = os.environ.get(
    "REMIT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def _admin() -> sa.Engine:
    return sa.create_engine(
        sa.make_url(POSTGRES).set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT"
    )


def fresh_database(kind: str, folder: Path) -> str:
    """A new, empty database: a SQLite file in `folder`, or a Postgres database on the server."""
    if kind == "sqlite":
        return f"sqlite:///{folder / f'bench-{uuid.uuid4().hex[:8]}.sqlite'}"
    admin = _admin()
    name = f"remit_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = admin.url.set(database=name).render_as_string(hide_password=False)
    admin.dispose()
    return url


def drop_database(url: str) -> None:
    if url.startswith("sqlite"):
        return
    admin = _admin()
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{sa.make_url(url).database}" WITH (FORCE)'))
    admin.dispose()


def write_section(title: str, body: str) -> None:
    """Put `## title` with `body` in BENCHMARKS.md, in place of the section of that title."""
    section = f"## {title}\n\n{body.strip()}\n"
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    start = text.find(f"## {title}\n")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + (text[end:] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def figure_table(figures: list[tuple[str, float, str, str]]) -> list[str]:
    """The lines of a markdown table of `(name, value, unit, what)` figures."""
    return [
        "| figure | value | unit | what |",
        "|---|---|---|---|",
        *[f"| `{name}` | {value:.2f} | {unit} | {note} |" for name, value, unit, note in figures],
    ]


Figure = tuple[str, float, str, str]


def run_alone(
    script: str,
    measure: Callable[..., list[Figure]],
    write: Callable[..., None],
    *,
    quick_help: str,
) -> None:
    """The `main()` of a benchmark run on its own: `--quick` and `--write`, in a throwaway folder."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        figures = measure(quick=args.quick, folder=Path(folder))
    if args.write:
        write(figures, command=f"python bench/{script}" + (" --quick" if args.quick else ""))
