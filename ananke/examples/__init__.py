"""The Ananke paper's queries on PySpark, with workload generators (A 1-2, A 6)."""
