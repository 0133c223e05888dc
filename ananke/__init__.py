"""Live forward provenance (Ananke, A 3-5) for PySpark queries.

- :mod:`ananke.query`: backward-provenance wrappers (``ProvQuery`` / ``Provenanced`` /
  ``ProvSink``) that record the operator graph; :mod:`ananke.graph`: static U (A 4).
- :mod:`ananke.ank1`: ANK-1 (A 5.1), a description ``Ank1`` and its runtime ``Ank1Logic``
  with ``on_tuple`` / ``on_watermark`` / ``horizon``; :mod:`ananke.spark_adapter` feeds it
  from ``foreachBatch`` and the query's progress watermark.
- :mod:`ananke.ankn`: ANK-N (A 5.2) from Spark's own operators.
- :mod:`ananke.items`: the graph stream; :mod:`ananke.store`: the graph in PostgreSQL.
- :mod:`ananke.ids`: deterministic source ids (``source_id_col``), shared with the Archiver.

Only :mod:`ananke.store` and the Spark modules need psycopg2 / pyspark; importing this
package needs neither.
"""

from ananke.ank1 import Ank1, Ank1Logic, Ank1Stats
from ananke.graph import OperatorGraph
from ananke.ids import PROV, source_id_col
from ananke.items import Edge, GraphItem, GraphSink, Label, ListSink, SinkTuple, SinkVertex, SourceVertex

__all__ = [
    "PROV", "Ank1", "Ank1Logic", "Ank1Stats", "Edge", "GraphItem", "GraphSink", "Label", "ListSink",
    "OperatorGraph", "SinkTuple", "SinkVertex", "SourceVertex", "source_id_col",
]
