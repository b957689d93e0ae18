"""A ``prometheus_client`` collector for a ``kvreuse.Tracker``.

A Python router that already serves ``/metrics`` with ``prometheus_client`` adds the
tracker's families to its registry::

    import kvreuse, kvreuse.prometheus
    tracker = kvreuse.Tracker(16, const_labels={"router_id": "router-0"})
    kvreuse.prometheus.register(tracker)        # the default registry, or registry=...

The families are read from the tracker each time the registry is collected, so they are
never stale.
"""

from typing import Iterator, Optional

from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from ._kvreuse import Tracker

__all__ = ["TrackerCollector", "register"]


class TrackerCollector(Collector):
    """Yields a tracker's metric families, as Prometheus counters and gauges."""

    def __init__(self, tracker: Tracker) -> None:
        self._tracker = tracker

    def collect(self) -> Iterator[Metric]:
        for name, kind, help_text, samples in self._tracker.metric_families():
            labels = sorted({key for sample_labels, _ in samples for key, _ in sample_labels})
            if kind == "counter":
                # prometheus_client adds `_total` to a counter family's samples itself.
                family = CounterMetricFamily(name.removesuffix("_total"), help_text, labels=labels)
            else:
                family = GaugeMetricFamily(name, help_text, labels=labels)
            for sample_labels, value in samples:
                values = dict(sample_labels)
                family.add_metric([values.get(key, "") for key in labels], value)
            yield family


def register(tracker: Tracker, registry: Optional[CollectorRegistry] = None) -> TrackerCollector:
    """Adds ``tracker``'s families to ``registry`` (the default registry when ``None``)."""
    collector = TrackerCollector(tracker)
    (registry if registry is not None else REGISTRY).register(collector)
    return collector
