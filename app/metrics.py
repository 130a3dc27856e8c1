"""Prometheus metrics, one registry per service instance (tests build many apps in one process)."""

from __future__ import annotations

from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "recall_request_seconds", "HTTP request latency by route template", ["method", "route", "status"],
            registry=self.registry, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.batch_size = Histogram(
            "recall_batch_size", "Inputs per model or index call", ["batcher"], registry=self.registry,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        )
        self.ingested = Counter("recall_ingested_items_total", "Items committed", ["collection"], registry=self.registry)
        self.failed = Counter("recall_ingest_failures_total", "Files refused at ingest", ["collection"], registry=self.registry)

    def observe_batch(self, batcher: str, size: int) -> None:
        self.batch_size.labels(batcher).observe(size)

    def add_gauges(self, collect: Callable[[], Iterable[Metric]]) -> None:
        """Gauges computed at scrape time (queue depths, collection sizes)."""

        class _Collector:
            def collect(self) -> Iterable[Metric]:
                return collect()

        self.registry.register(_Collector())

    def render(self) -> bytes:
        return generate_latest(self.registry)


def gauge(name: str, documentation: str, label: str, values: dict[str, float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for key, value in values.items():
        family.add_metric([key], value)
    return family
