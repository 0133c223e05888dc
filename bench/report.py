"""Re-render BENCHMARKS.md from the stored results: ``python -m bench.report``.

Every ``bench/results/NAME.json`` is judged again by its benchmark's ``targets(data)``
under the current verdict rules (:func:`bench.harness.verdict`), and the glance table is
regenerated, with each result marked stale or current (:func:`bench.harness.staleness`).
A benchmark whose module defines ``render(data)`` (its section's text from a stored
result) also gets its section rewritten, so a section never states a verdict the glance
table no longer gives. Nothing is measured.
"""

from __future__ import annotations

import importlib
import json

from bench.harness import RESULTS, module_name, replace_section, section, write_glance


def rerender() -> list[str]:
    """Rewrite the section of every stored result whose module can render one; the
    names rewritten."""
    done = []
    for path in sorted(RESULTS.glob("*.json")):
        try:
            payload = json.loads(path.read_text())
            module = importlib.import_module(module_name(path.stem.removesuffix("_quick")))
        except (OSError, ValueError, ImportError):
            continue
        render = getattr(module, "render", None)
        if render is None or not isinstance(payload, dict) or payload.get("benchmark") != path.stem:
            continue
        try:
            text = render(payload)
        except (KeyError, TypeError, ValueError, IndexError) as exc:  # older than its module's render
            print(f"{path.stem}: not re-rendered, the stored result predates its renderer (missing {exc})")
            continue
        replace_section(path.stem, section(path.stem, payload, text, path.with_suffix(".png").exists()))
        done.append(path.stem)
    return done


def main() -> int:
    print("sections re-rendered:", ", ".join(rerender()) or "none")
    write_glance()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
