"""The bottom layer: what every package may import, and which imports no package.

It holds the root error and the small grammars that several layers share (durations).
It uses the standard library only, so ``scheduler``, ``archive``, ``ananke``,
``similarity`` and ``recall`` reach it without importing anything above them
(docs/ARCHITECTURE.md, "Layers").
"""

from moirae.base.errors import MoiraeError

__all__ = ["MoiraeError"]
