"""Make ``sim_strategies.py`` beside these tests importable (the test folders are not packages)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
