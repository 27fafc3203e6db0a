"""`/metrics`: Prometheus text with vLLM's metric names, units and buckets (vLLM v1's
`vllm/v1/metrics/loggers.py`), so dashboards, KEDA scalers and HPA adapters written for vLLM
read it unchanged.

Gauges are read from the engine at the scrape (`LiveEngine.state`); counters and histograms
are kept here as requests are served. Latencies are simulated seconds (wall seconds at
`--speed 1`). Every series has the labels `model_name` and `engine` (the instance; "0" behind
one endpoint, which sums the instances as vLLM's data-parallel front end does).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from sim.serve.live import EngineState

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
TOKEN_BUCKETS = tuple(float(m * 10**e) for e in range(0, 7) for m in (1, 2, 5))
FINISH_REASONS = ("stop", "length", "abort")


class Histogram:
    """Cumulative bucket counts and a sum, as Prometheus exposes them."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.sum += value * times

    def buckets(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, float(running)))
        return out


class ServeMetrics(Collector):
    """One endpoint's counters and histograms, and its gauges read at each scrape."""

    def __init__(self, model: str, engine: str, state: object) -> None:
        self.labels = {"model_name": model, "engine": engine}
        self.state = state  # a callable returning `EngineState`
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished = dict.fromkeys(FINISH_REASONS, 0)
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(REQUEST_BUCKETS)
        self.queue = Histogram(REQUEST_BUCKETS)
        self.prompt_hist = Histogram(TOKEN_BUCKETS)
        self.generation_hist = Histogram(TOKEN_BUCKETS)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        state: EngineState = self.state()  # type: ignore[operator]
        names, values = list(self.labels), list(self.labels.values())

        def gauge(name: str, doc: str, value: float) -> Metric:
            g = GaugeMetricFamily(name, doc, labels=names)
            g.add_metric(values, value)
            return g

        def counter(name: str, doc: str, value: float) -> Metric:
            c = CounterMetricFamily(name, doc, labels=names)
            c.add_metric(values, value)
            return c

        def histogram(name: str, doc: str, h: Histogram) -> Metric:
            m = HistogramMetricFamily(name, doc, labels=names)
            m.add_metric(values, h.buckets(), h.sum)
            return m

        yield gauge("vllm:num_requests_running", "Requests in model execution batches.",
                    state.num_running)  # fmt: skip
        yield gauge("vllm:num_requests_waiting", "Requests waiting to be processed.",
                    state.num_waiting)  # fmt: skip
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                    state.kv_usage)  # fmt: skip
        yield counter("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.",
                      state.prefix_queries)  # fmt: skip
        yield counter("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.",
                      state.prefix_hits)  # fmt: skip
        yield counter("vllm:num_preemptions", "Cumulative number of preemptions.",
                      state.num_preemptions)  # fmt: skip
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                      self.prompt_tokens)  # fmt: skip
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.",
                      self.generation_tokens)  # fmt: skip
        success = CounterMetricFamily("vllm:request_success", "Count of finished requests.",
                                      labels=[*names, "finished_reason"])  # fmt: skip
        for reason, count in self.finished.items():
            success.add_metric([*values, reason], count)
        yield success
        yield histogram("vllm:time_to_first_token_seconds", "Time to first token in seconds.",
                        self.ttft)  # fmt: skip
        yield histogram("vllm:inter_token_latency_seconds", "Inter-token latency in seconds.",
                        self.itl)  # fmt: skip
        yield histogram("vllm:e2e_request_latency_seconds",
                        "End-to-end request latency in seconds.", self.e2e)  # fmt: skip
        yield histogram("vllm:request_queue_time_seconds",
                        "Time spent in the WAITING phase for a request.", self.queue)  # fmt: skip
        yield histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                        self.prompt_hist)  # fmt: skip
        yield histogram("vllm:request_generation_tokens",
                        "Number of generation tokens processed.",
                        self.generation_hist)  # fmt: skip
