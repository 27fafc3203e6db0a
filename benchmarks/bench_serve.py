"""`batchsim serve` under load: how late tokens leave the server against their simulated time.

The server runs in this process, pinned to one core (`--core`), on scenarios/quickstart.yaml's
continuous variant with `policy.max_num_seqs` raised to the largest stream count (every stream
in the batch at once: one step end sends a token to each). A client process on the other cores
(aiohttp) keeps `--streams` streaming completions open, `--rounds` requests each, prompts of
`--prompt` bytes (one token per 4 under the default rule) and `--output` tokens with
`ignore_eos`. The server records, for each write to a stream, the wall time it left minus the
wall time the simulation emitted that stream's newest token (`sim.serve.server.Driver.lags`);
the table prints its percentiles per stream count.

    python benchmarks/bench_serve.py                 # 1, 64 and 256 streams
    python benchmarks/bench_serve.py --streams 256 --rounds 4
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.scenario.load import load_scenario  # noqa: E402
from sim.serve.live import LiveEngine  # noqa: E402
from sim.serve.server import Server  # noqa: E402
from sim.serve.tokens import Tokens  # noqa: E402

CLIENT = textwrap.dedent("""
    import asyncio, sys, aiohttp
    port, streams, rounds, prompt, output = (int(a) for a in sys.argv[1:6])
    body = {"prompt": "x" * prompt, "max_tokens": output, "stream": True, "ignore_eos": True}
    async def stream(session):
        for _ in range(rounds):
            async with session.post(f"http://127.0.0.1:{port}/v1/completions", json=body) as r:
                assert r.status == 200, r.status
                async for _ in r.content.iter_any():
                    pass
    async def main():
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            await asyncio.gather(*[stream(session) for _ in range(streams)])
    asyncio.run(main())
""")


def measure(streams: int, rounds: int, prompt: int, output: int, max_seqs: int,
            core: int) -> dict[str, float]:  # fmt: skip
    scenario = load_scenario(ROOT / "scenarios" / "quickstart.yaml", [
        "metrics.warmup_s=0", "metrics.cooldown_s=0", f"policy.max_num_seqs={max_seqs}",
        f"policy.max_num_batched_tokens={max(4096, max_seqs * prompt // 4)}"])  # fmt: skip
    resolved = next(v for v in scenario.variants if v.variant == "continuous")
    others = sorted(set(os.sched_getaffinity(0)) - {core}) or [core]
    result: dict[str, float] = {}

    async def go() -> None:
        engine = LiveEngine(resolved, speed=1.0)
        server = Server(engine, Tokens(), "m", resolved.spec.model.max_model_len, drain_s=1.0)
        ports: list[int] = []

        async def client() -> None:
            while not ports:
                await asyncio.sleep(0.01)
            proc = await asyncio.create_subprocess_exec(
                "taskset", "-c", ",".join(map(str, others)), sys.executable, "-c", CLIENT,
                str(ports[0]), str(streams), str(rounds), str(prompt), str(output))  # fmt: skip
            code = await proc.wait()
            if code:
                raise SystemExit(f"the client failed (exit {code})")
            server.request_stop()

        started = time.perf_counter()
        task = asyncio.create_task(client())
        await server.serve("127.0.0.1", 0, False, ports.extend)
        await task
        lags = np.asarray(server.driver.lags.values) * 1e3
        result.update(wall_s=time.perf_counter() - started, writes=len(lags),
                      p50=np.percentile(lags, 50), p90=np.percentile(lags, 90),
                      p99=np.percentile(lags, 99), max=lags.max())  # fmt: skip
        engine.close("bench")

    asyncio.run(go())
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512, help="prompt bytes (128 tokens)")
    ap.add_argument("--output", type=int, default=128)
    ap.add_argument("--core", type=int, default=0, help="the server's core")
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.core})
    max_seqs = max(args.streams)
    print(f"server on core {args.core}; quickstart continuous, max_num_seqs {max_seqs}; "
          f"{args.rounds} requests per stream, {args.output} tokens each")  # fmt: skip
    print("| streams | writes | wall s | lag p50 ms | p90 ms | p99 ms | max ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.streams:
        r = measure(n, args.rounds, args.prompt, args.output, max_seqs, args.core)
        print(f"| {n} | {r['writes']:,.0f} | {r['wall_s']:.1f} | {r['p50']:.3f} | "
              f"{r['p90']:.3f} | {r['p99']:.3f} | {r['max']:.2f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
