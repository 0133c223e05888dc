"""One module per CLI command; importing this package registers them all."""

from moirae.cli.commands import archive_status, console, rematerialize, replay, run, steer  # noqa: F401
