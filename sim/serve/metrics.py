"""`/metrics`: Prometheus text with vLLM's metric names, units and buckets (vLLM v1's
`vllm/v1/metrics/loggers.py`), so dashboards, KEDA scalers and HPA adapters written for vLLM
read it unchanged.

Gauges are read from the engine at the scrape (`LiveEngine.state`). Counters and histograms are
recorded when vLLM records them (vllm/v1/metrics/stats.py): at each applied step, the prompt
tokens of a request that emits its first token (and its time to first token), every generated
token, every inter-token gap (one per request and step: a speculative step's emission of
several tokens is one gap, its whole gap) and the step's tokens; when a request ends, its phase
times (queue, prefill, decode, inference, time per output token, end to end) and token counts,
and `vllm:request_success_total` by finish reason. A request its client aborted counts under
`finished_reason="abort"` and enters none of the end-of-request histograms (vLLM's front end
drops an aborted request's state: vllm/v1/engine/output_processor.py). The engine tells these
as it applies steps (`sim.serve.record`). Latencies are simulated seconds (wall seconds at
`--speed 1`). Every `vllm:` series has the labels `model_name` and `engine` (the instance; "0"
behind one endpoint, which sums the instances as vLLM's data-parallel front end does).

The registry also holds what vLLM's has beside: prometheus_client's process, platform and
garbage-collector collectors, and the HTTP metrics of prometheus-fastapi-instrumentator
(`http_requests_total{handler,method,status}`, `http_request_size_bytes`,
`http_response_size_bytes`, `http_request_duration_highr_seconds`,
`http_request_duration_seconds{handler,method}`; wall seconds; statuses grouped as "2xx"; the
handlers vLLM excludes are not counted: vllm/entrypoints/openai/api_server.py).
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import (
    Counter,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    Summary,
)
from prometheus_client import (
    Histogram as PromHistogram,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from sim.core.request import ABORTED, FINISHED, Request
from sim.serve.live import EngineState

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
# vLLM's `build_cudagraph_buckets` without CUDA graphs (enforce_eager)
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
N_BUCKETS = (1, 2, 5, 10, 20)
FINISH_REASONS = ("stop", "length", "abort")
# prometheus-fastapi-instrumentator's defaults, and the handlers vLLM leaves out
HIGHR_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5,
                 5, 7.5, 10, 30, 60)  # fmt: skip
LOWR_BUCKETS = (0.1, 0.5, 1)
EXCLUDED_HANDLERS = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")


def buckets_1_2_5(max_value: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to `max_value` (vLLM's `build_1_2_5_buckets`)."""
    out: list[int] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return tuple(out)
            out.append(m * scale)
        scale *= 10


class Histogram:
    """Cumulative bucket counts and a sum, as Prometheus exposes them (an observation may
    count several times at once: a gap shared by a batch)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
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


# (attribute, name, help) of the histograms, in the order they are exposed
HISTOGRAMS = (
    ("ttft", "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    ("itl", "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    ("tpot", "vllm:request_time_per_output_token_seconds",
     "Histogram of time_per_output_token_seconds per request."),
    ("e2e", "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
    ("queue", "vllm:request_queue_time_seconds",
     "Histogram of time spent in WAITING phase for request."),
    ("inference", "vllm:request_inference_time_seconds",
     "Histogram of time spent in RUNNING phase for request."),
    ("prefill", "vllm:request_prefill_time_seconds",
     "Histogram of time spent in PREFILL phase for request."),
    ("decode", "vllm:request_decode_time_seconds",
     "Histogram of time spent in DECODE phase for request."),
    ("prompt_hist", "vllm:request_prompt_tokens", "Number of prefill tokens processed."),
    ("generation_hist", "vllm:request_generation_tokens", "Number of generation tokens processed."),
    ("max_generation", "vllm:request_max_num_generation_tokens",
     "Histogram of maximum number of requested generation tokens."),
    ("max_tokens", "vllm:request_params_max_tokens",
     "Histogram of the max_tokens request parameter."),
    ("n", "vllm:request_params_n", "Histogram of the n request parameter."),
    ("iteration", "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step."),
)  # fmt: skip


class ServeMetrics(Collector):
    """One endpoint's counters and histograms (a `sim.serve.record.Meter`: the engine tells it
    of each request's tokens and end, and of the steps and gaps of the instances it serves),
    its gauges read at each scrape, and its HTTP metrics (`middleware`)."""

    def __init__(
        self,
        model: str,
        engine: str,
        state: Callable[[], EngineState],
        *,
        max_model_len: int = 1 << 20,
        frontend_s: float = 0.0,
        cache_config: dict[str, str] | None = None,
    ) -> None:
        self.labels = {"model_name": model, "engine": engine}
        self.state = state
        self.frontend_s = frontend_s  # arrival to the scheduler's queue (vLLM's QUEUED event)
        self.cache_config = cache_config or {}
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished = dict.fromkeys(FINISH_REASONS, 0)
        tokens = buckets_1_2_5(max_model_len)
        bounds: dict[str, Sequence[float]] = {
            "ttft": TTFT_BUCKETS, "itl": ITL_BUCKETS, "tpot": ITL_BUCKETS,
            "prompt_hist": tokens, "generation_hist": tokens, "max_generation": tokens,
            "max_tokens": tokens, "n": N_BUCKETS, "iteration": ITERATION_BUCKETS,
        }  # fmt: skip
        self.histograms = {key: Histogram(bounds.get(key, REQUEST_BUCKETS))
                           for key, _, _ in HISTOGRAMS}  # fmt: skip
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.http = HttpMetrics(self.registry)

    def __getitem__(self, key: str) -> Histogram:
        return self.histograms[key]

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # -- what the engine tells (`sim.serve.record.Meter`) ------------------------------------------

    def tokens(self, req: Request, before: int) -> None:
        self.generation_tokens += req.num_output_tokens - before
        if before == 0:  # its prefill is done: vLLM counts the prompt and the TTFT here
            self.prompt_tokens += req.num_prompt_tokens
            self.histograms["ttft"].observe(req.first_token_s - req.arrival_s)

    def gaps(self, gap_s: float, count: int) -> None:
        self.histograms["itl"].observe(gap_s, count)

    def steps(self, num_tokens: int, num_steps: int) -> None:
        if num_tokens > 0:
            self.histograms["iteration"].observe(num_tokens, num_steps)

    def ended(self, req: Request) -> None:
        if req.state != FINISHED:
            if req.reject_reason == ABORTED:
                self.finished["abort"] += 1
            return  # refused: never an engine request of vLLM's (an HTTP error)
        self.finished["length"] += 1  # the simulated model never stops before max_tokens
        h, n = self.histograms, req.num_output_tokens
        last = req.last_token_s if n > 1 else req.first_token_s
        scheduled = req.first_scheduled_s
        h["e2e"].observe(req.finish_s - req.arrival_s)
        h["queue"].observe(max(0.0, scheduled - req.arrival_s - self.frontend_s))
        h["prefill"].observe(req.first_token_s - scheduled)
        h["decode"].observe(last - req.first_token_s)
        h["inference"].observe(last - scheduled)
        h["tpot"].observe((last - req.first_token_s) / (n - 1) if n > 1 else 0.0)
        h["prompt_hist"].observe(req.num_prompt_tokens)
        h["generation_hist"].observe(n)
        h["max_generation"].observe(req.max_output_tokens)
        h["max_tokens"].observe(req.max_output_tokens)
        h["n"].observe(1)

    # -- the scrape ------------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        state = self.state()
        names, values = list(self.labels), list(self.labels.values())

        def gauge(name: str, doc: str, value: float) -> Metric:
            g = GaugeMetricFamily(name, doc, labels=names)
            g.add_metric(values, value)
            return g

        def counter(name: str, doc: str, value: float) -> Metric:
            c = CounterMetricFamily(name, doc, labels=names)
            c.add_metric(values, value)
            return c

        yield gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                    state.num_running)  # fmt: skip
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                    state.num_waiting)  # fmt: skip
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                    state.kv_usage)  # fmt: skip
        if self.cache_config:
            info = GaugeMetricFamily("vllm:cache_config_info",
                                     "Information of the LLMEngine CacheConfig",
                                     labels=[*names, *self.cache_config])  # fmt: skip
            info.add_metric([*values, *self.cache_config.values()], 1.0)
            yield info
        yield counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of "
                      "queried tokens.", state.prefix_queries)  # fmt: skip
        yield counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of "
                      "cached tokens.", state.prefix_hits)  # fmt: skip
        yield counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                      state.num_preemptions)  # fmt: skip
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                      self.prompt_tokens)  # fmt: skip
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.",
                      self.generation_tokens)  # fmt: skip
        success = CounterMetricFamily("vllm:request_success",
                                      "Count of successfully processed requests.",
                                      labels=[*names, "finished_reason"])  # fmt: skip
        for reason, count in self.finished.items():
            success.add_metric([*values, reason], count)
        yield success
        for key, name, doc in HISTOGRAMS:
            m = HistogramMetricFamily(name, doc, labels=names)
            h = self.histograms[key]
            m.add_metric(values, h.buckets(), h.sum)
            yield m


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HttpMetrics:
    """prometheus-fastapi-instrumentator's default metrics, as vLLM's API server exposes them
    (see the module docstring), recorded by an aiohttp middleware (`middleware`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.total = Counter("http_requests_total",
                             "Total number of requests by method, status and handler.",
                             ("method", "status", "handler"), registry=registry)  # fmt: skip
        self.in_size = Summary("http_request_size_bytes",
                               "Content length of incoming requests by handler. Only value of "
                               "header is respected. Otherwise ignored. No percentile "
                               "calculated. ", ("handler",), registry=registry)  # fmt: skip
        self.out_size = Summary("http_response_size_bytes",
                                "Content length of outgoing responses by handler. Only value "
                                "of header is respected. Otherwise ignored. No percentile "
                                "calculated. ", ("handler",), registry=registry)  # fmt: skip
        self.highr = PromHistogram("http_request_duration_highr_seconds",
                                   "Latency with many buckets but no API specific labels. Made "
                                   "for more accurate percentile calculations. ",
                                   buckets=HIGHR_BUCKETS, registry=registry)  # fmt: skip
        self.lowr = PromHistogram("http_request_duration_seconds",
                                  "Latency with only few buckets by handler. Made to be only "
                                  "used if aggregation by handler is important. ",
                                  ("method", "handler"), buckets=LOWR_BUCKETS,
                                  registry=registry)  # fmt: skip

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        start = time.perf_counter()
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            self._record(request, exc.status, None, time.perf_counter() - start)
            raise
        except asyncio.CancelledError:  # its client went away: no response, not counted
            raise
        except Exception:
            self._record(request, 500, None, time.perf_counter() - start)
            raise
        self._record(request, response.status, response, time.perf_counter() - start)
        return response

    def _record(self, request: web.Request, status: int, response: web.StreamResponse | None,
                seconds: float) -> None:  # fmt: skip
        resource = request.match_info.route.resource
        name = resource.canonical if resource is not None else "none"
        if name in EXCLUDED_HANDLERS:
            return
        self.total.labels(request.method, f"{status // 100}xx", name).inc()
        self.in_size.labels(name).observe(_length(request.headers.get("Content-Length")))
        out = response.content_length if response is not None else None
        self.out_size.labels(name).observe(out or 0)
        self.highr.observe(seconds)
        self.lowr.labels(request.method, name).observe(seconds)


def _length(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0
