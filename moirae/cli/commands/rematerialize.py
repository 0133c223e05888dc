"""``moirae rematerialize``: re-process raw chunks into a query's history (M 4.2)."""

from __future__ import annotations

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from moirae.cli.commands.registry import command


@command("rematerialize")
def rematerialize_cmd(args) -> int:
    from moirae import Engine
    from moirae.materialize.replica import rematerialize
    from moirae.scenarios import deploy

    overrides = {"scenario": args.scenario} if args.scenario else {}
    engine = Engine.from_config(args.config, **overrides)
    try:
        deploy(engine.settings.scenario, engine, live=False, progress=False, materialize=False)
        rows = {"events": 0, "context": 0}
        columns = (TextColumn("rematerialize {task.fields[query]}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("chunks  {task.fields[events]:>7} events  {task.fields[rate]}"),
                   TimeElapsedColumn(), TimeRemainingColumn())
        with Progress(*columns) as bar:
            task = bar.add_task("", total=None, query=args.query, events=0, rate="")

            def tick(res, done, total):
                rows["events"] += res.events
                rows["context"] += res.context_rows
                elapsed = bar.tasks[0].elapsed or 1e-9
                bar.update(task, completed=done, total=total, events=rows["events"],
                           rate=f"{done / elapsed:.1f} chunks/s")

            results = rematerialize(engine.materializer, args.query, args.since, args.until, resume=args.resume,
                                    on_chunk=tick, batch=args.batch)
        print(f"rematerialized {len(results)} chunks of {args.query!r}: {rows['events']} events, "
              f"{rows['context']} context tuples")
        builder = engine.index_builds
        if builder.pending():  # the rewritten chunks' similarity indexes, built in the background meanwhile
            print(f"building the similarity indexes of {builder.pending()} more chunk(s)", flush=True)
            builder.drain()
        if builder.built or builder.failed:
            print(f"similarity indexes: {builder.built} built, {builder.failed} failed (built on first use instead)")
    finally:
        engine.close()
    return 0
