"""Live forward provenance (Ananke, A 3-5) for PySpark queries.

- :mod:`ananke.query`: backward-provenance wrappers (``ProvQuery`` / ``Provenanced`` /
  ``ProvSink``) that record the operator graph; :mod:`ananke.graph`: static U (A 4).
- :mod:`ananke.ank1`: ANK-1 (A 5.1), a description ``Ank1`` and its runtime ``Ank1Logic``
  with ``on_tuple`` / ``on_watermark`` / ``horizon``; :mod:`ananke.spark_adapter` feeds it
  from ``foreachBatch`` and the query's progress watermark.
- :mod:`ananke.ankn`: ANK-N (A 5.2) from Spark's own operators.
- :mod:`ananke.digest`: a window's provenance kept as a digest, resolved at the sink.
- :mod:`ananke.items`: the graph stream; :mod:`ananke.store`: the graph in PostgreSQL.
- :mod:`ananke.polynomial`: how-provenance polynomials per sink tuple (H 4), evaluated by
  :mod:`ananke.poly_eval` under removals and corrections, kept by :mod:`ananke.poly_store`;
  :mod:`ananke.poly_maint` finds the windows a changed tuple falls in (H 6).
- :mod:`ananke.ids`: deterministic source ids (``source_id_col``), shared with the Archiver.
- :mod:`ananke.abc`: the extension points (graph sink, digest resolver, horizon and late
  listeners); :mod:`ananke.errors`: :class:`AnankeError` and its subclasses.

The names below are the public surface. Only :mod:`ananke.store` and the Spark modules
need psycopg2 / pyspark, and only when called; importing this package needs neither.
"""

from ananke.abc import GraphSink, HorizonListener, LateListener, Resolver
from ananke.ank1 import Ank1, Ank1Logic, Ank1Stats
from ananke.ankn import AnkNSparkSink, ankn_items
from ananke.digest import Digest, DigestSpec
from ananke.errors import (
    AnankeError,
    BadDuration,
    BadPrefix,
    GraphError,
    ProvenanceError,
    UnknownSink,
    UnknownSinkName,
)
from ananke.graph import OperatorGraph
from ananke.ids import PROV, source_id_col
from ananke.items import Edge, GraphItem, Label, ListSink, SinkTuple, SinkVertex, SourceVertex
from ananke.poly_condition import Condition
from ananke.poly_eval import Outcome, evaluate, evaluate_many
from ananke.poly_maint import recompute, windows_of
from ananke.poly_store import PolyStore
from ananke.polynomial import AggSpec, Poly, PolyPlan
from ananke.query import Provenanced, ProvQuery, ProvSink
from ananke.spark_adapter import Ank1SparkSink, progress_watermark
from ananke.store import ForwardAnswer, GraphStore

__all__ = [
    "PROV", "AggSpec", "AnankeError", "Ank1", "Ank1Logic", "Ank1SparkSink", "Ank1Stats", "AnkNSparkSink", "BadDuration",
    "BadPrefix", "Condition", "Digest", "DigestSpec", "Edge", "ForwardAnswer", "GraphError", "GraphItem", "GraphSink",
    "GraphStore", "HorizonListener", "Label", "LateListener", "ListSink", "OperatorGraph", "Outcome", "Poly", "PolyPlan", "PolyStore", "ProvQuery", "ProvSink",
    "Provenanced", "ProvenanceError", "Resolver", "SinkTuple", "SinkVertex", "SourceVertex", "UnknownSink",
    "UnknownSinkName", "ankn_items", "evaluate", "evaluate_many", "progress_watermark", "recompute",
    "source_id_col", "windows_of",
]
