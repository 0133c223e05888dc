"""The Engine's pattern methods: MATCH_RECOGNIZE event-queries run live (T 4;
docs/ARCHITECTURE.md, 3.8). A mixin of :class:`moirae.engine.engine.Engine`; it uses the
engine's ``sources``, ``deploy``, ``db``, ``spark``, ``started`` and ``event_query``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from moirae.queries.errors import QueryDefinitionError


class PatternMethods:
    """Pattern event-queries on an engine (see the module doc)."""

    def pattern_query(self, name: str, sql: str, inputs: str | Sequence[str] | None = None,
                      eid: str = "eid", ts: str = "ts"):
        """Deploy a pattern event-query (T 4): ``sql`` is one ``SELECT ... FROM stream
        MATCH_RECOGNIZE (...)`` (docs/PATTERNS.md) over a registered source (``inputs``,
        default the FROM stream). Each match is an event: ``eid`` (the same for the same
        match across replays, restarts and materialization), ``ts`` (its last row's time),
        the PARTITION BY columns and the MEASURES; its provenance is its bound rows (its
        polynomial their product), U is its WITHIN (which a live pattern needs), and the
        sink's watermark lies WITHIN below Spark's (a match is held until it can no longer
        grow, docs/PATTERNS.md). A bad pattern, or one naming a
        column the source lacks, is refused here in one line naming the pattern and the
        position (:class:`moirae.patterns.PatternError`); a row whose DEFINE fails at run
        time is a dead letter of the source. Returns the :class:`EventQuery`."""
        from moirae.patterns.compile import compile_pattern
        from moirae.patterns.spark_dead import DeadLetterWriter
        from moirae.patterns.spark_operator import compile_live, pattern_function

        if inputs is None:
            inputs = (compile_pattern(sql, name=name).source,)
        inputs, src = self._pattern_source(f"pattern query {name!r} reads", inputs)
        cp = compile_live(name, sql, src.df.schema, src.ts)
        dead = DeadLetterWriter(self.db.dsn, self.db.schema, src.name)
        fn = pattern_function(cp, stream=src.name, payload=src.payload, eid=eid, ts=ts, dead=dead)
        return self._deploy_patterns(name, fn, inputs, eid, ts)

    def pattern_queries(self, name: str, patterns: Mapping[str, str] | Sequence[tuple[str, str]],
                        inputs: str | Sequence[str] | None = None, eid: str = "eid", ts: str = "ts",
                        tag: str = "pattern"):
        """Deploy several patterns over one source as one event-query ``name`` run by one
        operator (T 5.2.3's many patterns; docs/PATTERNS.md, "Many patterns, one
        operator"): ``patterns`` maps each pattern's name to its ``SELECT ... FROM stream
        MATCH_RECOGNIZE (...)``. They read the same source (``inputs``, default their FROM)
        and have the same PARTITION BY and ORDER BY; one ``transformWithStateInPandas``
        keeps every pattern's state per key and evaluates their predicates over each key's
        rows in one pass. Each match is the event :meth:`pattern_query` would give for its
        pattern alone (same ``eid``, measures and provenance), with its pattern's name in
        column ``tag``; a measure another pattern lacks is NULL. U is the largest WITHIN.
        Refused in one line naming the pattern: a bad pattern, patterns over other keys,
        other sources, or a measure two patterns type differently."""
        from moirae.patterns.compile import compile_pattern
        from moirae.patterns.spark_dead import DeadLetterWriter
        from moirae.patterns.spark_operator import compile_live, pattern_set_function

        pairs = list(patterns.items()) if isinstance(patterns, Mapping) else [tuple(p) for p in patterns]
        if not pairs:
            raise QueryDefinitionError(f"pattern queries {name!r}: no pattern given")
        if inputs is None:
            froms = {n: compile_pattern(sql, name=n).source for n, sql in pairs}
            if len(set(froms.values())) > 1:
                other = next(n for n, s in froms.items() if s != froms[pairs[0][0]])
                raise QueryDefinitionError(f"pattern queries {name!r}: pattern {other!r} reads "
                                           f"{froms[other]!r}, pattern {pairs[0][0]!r} reads "
                                           f"{froms[pairs[0][0]]!r}; one operator reads one source")
            inputs = (froms[pairs[0][0]],)
        inputs, src = self._pattern_source(f"pattern queries {name!r} read", inputs)
        cps = [compile_live(n, sql, src.df.schema, src.ts) for n, sql in pairs]
        dead = DeadLetterWriter(self.db.dsn, self.db.schema, src.name)
        fn = pattern_set_function(cps, stream=src.name, payload=src.payload, tag=tag, eid=eid, ts=ts, dead=dead)
        return self._deploy_patterns(name, fn, inputs, eid, ts)

    def _pattern_source(self, what: str, inputs: str | Sequence[str]):
        """``(inputs, source)``: the one registered source a pattern operator reads, or a
        one-line refusal starting with ``what``."""
        inputs = (inputs,) if isinstance(inputs, str) else tuple(inputs)
        if len(inputs) != 1:
            raise QueryDefinitionError(f"{what} one stream, got inputs {list(inputs)}")
        src = self.sources.get(inputs[0])
        if src is None:
            raise QueryDefinitionError(f"{what} unknown source {inputs[0]!r} (sources: {sorted(self.sources.by_name)})")
        return inputs, src

    def _deploy_patterns(self, name: str, fn, inputs: tuple[str, ...], eid: str, ts: str):
        from moirae.patterns.spark_operator import rocksdb_start, with_rocksdb

        if self.started:  # the query starts inside event_query
            with rocksdb_start(self.spark):
                q = self.event_query(name, fn, list(inputs), eid, ts)
        else:
            q = self.event_query(name, fn, list(inputs), eid, ts)
        flow = self.deploy.flows[name]
        flow.start = with_rocksdb(self.spark, flow.start)  # every later start of it: restarts, Engine.start
        return q
