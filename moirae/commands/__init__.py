"""One module per CLI command; importing this package registers them all."""

from moirae.commands import archive_status, run  # noqa: F401
