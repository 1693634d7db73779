"""Quantiles from a Prometheus histogram, as its `histogram_quantile` computes them (demo, benches)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from olstream.devkit.demo_support import histogram_buckets, merge_buckets, quantile


def exposition(values: list[float]) -> str:
    registry = CollectorRegistry()
    h = Histogram("wait_seconds", "a wait", buckets=(0.01, 0.1, 1.0), registry=registry)
    for v in values:
        h.observe(v)
    return generate_latest(registry).decode()


def test_buckets_are_read_from_the_text_format_and_merged_across_processes() -> None:
    a = histogram_buckets(exposition([0.005, 0.05, 0.5]), "wait_seconds")
    assert a == {0.01: 1.0, 0.1: 2.0, 1.0: 3.0, float("inf"): 3.0}
    b = histogram_buckets(exposition([5.0]), "wait_seconds")
    assert merge_buckets([a, b])[float("inf")] == 4.0


def test_quantiles_interpolate_within_the_bucket() -> None:
    buckets = histogram_buckets(exposition([0.005] * 50 + [0.05] * 50), "wait_seconds")
    assert quantile(buckets, 0.5) == 0.01
    p99 = quantile(buckets, 0.99)
    assert p99 is not None and 0.01 < p99 < 0.1
    assert quantile(histogram_buckets(exposition([]), "wait_seconds"), 0.5) is None
    assert quantile(histogram_buckets(exposition([5.0]), "wait_seconds"), 0.99) == 1.0  # past the last bound
