"""The ``moirae`` command line (the console script ``moirae = moirae.cli:main``).

:mod:`moirae.cli.parser` declares the commands and their arguments,
:mod:`moirae.cli.commands` holds one module per command, :mod:`moirae.cli.main` runs
one, and :mod:`moirae.cli.board` is the terminal board of ``moirae run``.
"""

from moirae.cli.main import main
from moirae.cli.parser import build_parser

__all__ = ["build_parser", "main"]
