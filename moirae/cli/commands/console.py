"""``moirae console``: serve the HTTP API and the console page over the database.

No engine runs in this process, so the view is read-only (events, results, chunks,
provenance; live updates by polling what an engine elsewhere writes); steering answers
409 "no engine is running". ``moirae run`` serves the same API over its live engine.
"""

from __future__ import annotations

import time

from moirae.cli.commands.registry import command


@command("console")
def console(args) -> int:
    from moirae import config
    from moirae.api import serve
    from moirae.read.readonly import ReadOnlyEngine

    tls = {k: v for k, v in (("tls_cert", args.tls_cert), ("tls_key", args.tls_key)) if v}
    settings = config.load(args.config, {"api": tls} if tls else None)
    host = args.host or settings.api.host
    port = settings.api.port if args.port is None else args.port
    engine = ReadOnlyEngine(settings)
    try:
        server = serve(engine, host=host, port=port)
        print(f"moirae: console on {server.url}/ (read-only: no engine runs in this process; Ctrl-C to stop)",
              flush=True)
        deadline = None if args.duration is None else time.monotonic() + args.duration
        try:
            while server.running and (deadline is None or time.monotonic() < deadline):
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
        server.stop()
    finally:
        engine.close()
    return 0

