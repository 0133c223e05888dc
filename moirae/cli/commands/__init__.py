"""One module per CLI command; importing this package registers them all."""

from moirae.cli.commands import (  # noqa: F401
    archive_status,
    console,
    lookup,
    monitors,
    reference,
    rematerialize,
    replay,
    retract,
    run,
    steer,
)
