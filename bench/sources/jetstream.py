"""Throughput of the JetStream source (``moirae_nats``) against a plain nats-py consumer
draining the same stream, in the same run.

A fresh JetStream stream on the machine's NATS server (127.0.0.1:4222) is filled with N
JSON messages (``ts``, ``id``, ``v``). Each round, in alternating order:

- **baseline**: a plain nats-py pull consumer (ephemeral, no acks) drains the stream in
  fetches of 1000 and decodes each payload with ``json.loads``;
- **source**: a Spark streaming query over ``moirae_nats`` (each micro-batch of at most
  50 000 sequences read as 2 partitions in parallel, ``local[2]``) writes every row to Spark's ``noop`` sink; timed from
  the query's start until it has read all N rows (query start-up included).

One unmeasured warm-up of each runs first (the first streaming query pays for starting
Spark's Python workers). Target: the source's throughput is at least 0.5x the baseline's in every round.
Run: ``python -m bench jetstream [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid

from bench.harness import exit_code, publish, run_orders, spread_note, target, verdict

MEASURES = ("bench/sources/jetstream.py", "moirae/sources/nats.py", "moirae/sources/payloads.py")
URL = "nats://127.0.0.1:4222"
GOAL = 0.5


async def _fill(stream: str, n: int) -> None:
    import nats
    from nats.js.api import StreamConfig

    nc = await nats.connect(URL)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    for lo in range(0, n, 1000):
        futs = [js.publish(f"{stream}.m", json.dumps({"ts": 1.7e9 + i / 100, "id": i, "v": i * 0.5}).encode())
                for i in range(lo, min(n, lo + 1000))]
        await asyncio.gather(*futs)
    await nc.close()


async def _drain(stream: str, n: int) -> int:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    nc = await nats.connect(URL)
    js = nc.jetstream()
    sub = await js.pull_subscribe("", stream=stream, config=ConsumerConfig(
        deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE, inactive_threshold=30.0))
    got = 0
    while got < n:
        for m in await sub.fetch(1000, timeout=5):
            json.loads(m.data)
            got += 1
    await sub.unsubscribe()
    await nc.close()
    return got


def baseline(stream: str, n: int) -> float:
    t0 = time.perf_counter()
    assert asyncio.run(_drain(stream, n)) == n
    return n / (time.perf_counter() - t0)


def source(spark, stream: str, n: int) -> float:
    from moirae.sources.nats import register_nats_source

    register_nats_source(spark)
    t0 = time.perf_counter()
    df = (spark.readStream.format("moirae_nats").option("stream", stream).option("maxBatch", "50000").option("partitions", "2")
          .option("schema", "ts timestamp, id long, v double").load())
    q = df.writeStream.format("noop").trigger(processingTime="0 seconds").start()
    try:
        while True:
            rows = sum(p["numInputRows"] for p in q.recentProgress)
            if rows >= n:
                break
            if q.exception() is not None:
                raise RuntimeError(str(q.exception()))
            time.sleep(0.05)
        took = time.perf_counter() - t0
    finally:
        q.stop()
    return n / took


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 000 messages, 2 rounds")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args(argv)
    n = 100_000 if args.quick else 300_000
    rounds = args.rounds or (2 if args.quick else 3)
    name = "jetstream_quick" if args.quick else "jetstream"
    from moirae.runtime.spark import spark_session

    stream = f"BENCH{uuid.uuid4().hex[:8]}"
    asyncio.run(_fill(stream, n))
    spark = spark_session(master="local[2]", app_name="bench-jetstream")
    results: dict[str, list[float]] = {"baseline": [], "source": []}
    try:
        baseline(stream, n)  # warm-up, not measured: Spark's JVM and Python workers start here
        source(spark, stream, n)
        for order in run_orders(["baseline", "source"], rounds):
            for which in order:
                rate = baseline(stream, n) if which == "baseline" else source(spark, stream, n)
                results[which].append(rate)
    finally:
        spark.stop()

        async def drop():
            import nats

            nc = await nats.connect(URL)
            await nc.jetstream().delete_stream(stream)
            await nc.close()

        asyncio.run(drop())
    ratios = [s / b for s, b in zip(results["source"], results["baseline"], strict=True)]
    met = verdict(ratios, GOAL)
    targets = [target("JetStream source throughput vs a plain nats-py consumer", f">= {GOAL}x",
                      ", ".join(f"{r:.2f}x" for r in ratios), met, spread_note(ratios, GOAL))]
    md = (f"### JetStream source throughput{' (quick)' if args.quick else ''}\n\n"
          f"{n:,} JSON messages in one JetStream stream on this machine's NATS; {rounds} rounds, "
          "alternating order.\n\n| round | plain nats-py (msg/s) | moirae_nats source (msg/s) | ratio |\n"
          "|---|---|---|---|\n"
          + "".join(f"| {i + 1} | {b:,.0f} | {s:,.0f} | {s / b:.2f}x |\n"
                    for i, (b, s) in enumerate(zip(results["baseline"], results["source"], strict=True)))
          + "\nThe source's time includes the streaming query's start and Spark's per-batch overhead; "
          "the baseline only drains and decodes.\n")
    publish(name, {"messages": n, "rounds": rounds, **results, "ratios": ratios}, md, targets=targets)
    print(md)
    return exit_code(targets)


if __name__ == "__main__":
    raise SystemExit(main())
