"""Archive benchmarks: chunk counts, ingest from Spark, partial indexing (M fig. 7)."""
