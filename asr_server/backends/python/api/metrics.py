"""Custom metrics and model control: accepted so that models using them load; not exported."""

from __future__ import annotations

import threading
from typing import Optional

from asr_server.backends.python.api.errors import TritonModelException


class Metric:
    """One labelled series of a MetricFamily; kept in memory only (not on the /metrics endpoint)."""

    def __init__(self, kind: str, labels: dict, buckets: Optional[list]) -> None:
        self._kind = kind
        self._labels = dict(labels)
        self._buckets = buckets
        self._lock = threading.Lock()
        self._value = 0.0

    def increment(self, value: float) -> None:
        if self._kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("a counter cannot be decremented")
        with self._lock:
            self._value += value

    def set(self, value: float) -> None:
        if self._kind != MetricFamily.GAUGE:
            raise TritonModelException("only a gauge can be set")
        with self._lock:
            self._value = float(value)

    def observe(self, value: float) -> None:
        if self._kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("only a histogram can observe")
        with self._lock:
            self._value += value  # the running sum, as the histogram's value

    def value(self) -> float:
        with self._lock:
            return self._value


class MetricFamily:
    COUNTER = "COUNTER"
    GAUGE = "GAUGE"
    HISTOGRAM = "HISTOGRAM"

    def __init__(self, name: str, description: str, kind: str) -> None:
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise TritonModelException(f"unknown metric kind {kind!r}")
        self.name = name
        self.description = description
        self.kind = kind

    def Metric(self, labels: Optional[dict] = None, buckets: Optional[list] = None) -> Metric:  # noqa: N802
        return Metric(self.kind, labels or {}, buckets)


def load_model(model_name: str, config: str = "", files: Optional[dict] = None) -> None:
    raise TritonModelException("model control from a python model is not supported by this server")


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    raise TritonModelException("model control from a python model is not supported by this server")


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    raise TritonModelException("model control from a python model is not supported by this server")
