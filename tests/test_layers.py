"""The import contracts in ``.importlinter`` hold: layers only import downwards, no
package has an import circle, the bottom layer is stdlib-only (docs/ARCHITECTURE.md,
"Layers"). ``make test`` runs this, so CI enforces them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports() -> str:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    done = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return done.stdout


def test_every_import_contract_is_kept():
    out = _lint_imports()
    assert "BROKEN" not in out
    assert out.count("KEPT") >= 4, out
