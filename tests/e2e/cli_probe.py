"""Run `remit` in this process once for each argv given, then print, as one line of JSON, what
that took: each exit code, what each printed, which heavy packages got imported (and every
top-level package imported, and every module of remit), how many database engines connected,
and the threads left running.

    python tests/e2e/cli_probe.py '[["--help"], ["runs", "--help"]]' [--engines]

Used by test_cli_startup.py, in a fresh interpreter, so that `sys.modules` is only what the
command imported.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import threading
from typing import Any

HEAVY = {"dbos", "fastapi", "opentelemetry", "sqlalchemy"}


def main() -> None:
    argvs: list[list[str]] = json.loads(sys.argv[1])
    # The engines themselves, not their ids: an engine a finished command dropped could be
    # collected, and the next command's engine given its id.
    engines: list[Any] = []
    if "--engines" in sys.argv[2:]:
        import sqlalchemy as sa

        def connected(connection: Any) -> None:
            if not any(engine is connection.engine for engine in engines):
                engines.append(connection.engine)

        sa.event.listen(sa.Engine, "engine_connect", connected)

    from remit.cli.main import main as remit

    codes: list[int] = []
    outputs: list[str] = []
    for argv in argvs:
        sys.argv = ["remit", *argv]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            try:
                remit()
                codes.append(0)
            except SystemExit as done:
                codes.append(int(done.code or 0))
        outputs.append(printed.getvalue())
    seen = {
        "codes": codes,
        "outputs": outputs,
        "heavy": sorted({name.split(".")[0] for name in sys.modules} & HEAVY),
        "packages": sorted({name.split(".")[0] for name in sys.modules}),
        "remit": sorted(name for name in sys.modules if name.startswith("remit.")),
        "engines": len(engines),
        "threads": sorted(
            t.name for t in threading.enumerate() if t is not threading.main_thread()
        ),
    }
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
