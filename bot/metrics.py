"""Prometheus text exposition for the few numbers an operator watches.

Counters and one histogram, kept in this process (one `baton serve` process
per machine; Prometheus sums across machines). Hand-rolled because the
exposition format is small and the hot path must stay lock-free.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: Seconds; enqueue latency is usually well under a millisecond.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)


class Histogram:
    def __init__(self, buckets: Iterable[float]) -> None:
        self.bounds = tuple(sorted(buckets))
        self.counts = [0] * (len(self.bounds) + 1)  # last slot: +Inf
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1

    def lines(self, name: str) -> list[str]:
        out, running = [], 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            out.append(f'{name}_bucket{{le="{bound:g}"}} {running}')
        out.append(f'{name}_bucket{{le="+Inf"}} {self.n}')
        out.append(f"{name}_sum {self.total:.6f}")
        out.append(f"{name}_count {self.n}")
        return out


@dataclass(frozen=True, slots=True)
class RedisGauges:
    """What `/metrics` reads from Redis at scrape time; -1 where Redis did not answer."""

    queue_depths: Mapping[str, int]
    #: The worker's counters (``baton.records.COUNTERS_KEY``): event name -> count.
    worker_events: Mapping[str, int] = field(default_factory=dict)
    outbox_pending: int = 0
    #: GitHub calls by "<task kind>:counted|free" (``baton.records.GITHUB_REQUESTS_KEY``).
    github_requests: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def unknown(cls, queue_names: Iterable[str]) -> RedisGauges:
        """Redis did not answer: gauges say -1; counters are left out (a counter never goes down)."""
        return cls(dict.fromkeys(queue_names, -1), {}, -1)


def _label(value: str) -> str:
    """A label value as the exposition format quotes it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    def __init__(self) -> None:
        self.deliveries: Counter[str] = Counter()
        self.enqueue_latency = Histogram(LATENCY_BUCKETS)

    def render(self, redis: RedisGauges | None) -> str:
        """The exposition text; ``redis`` None when there is no Redis to ask (setup mode)."""
        lines = [
            "# HELP baton_deliveries_total Webhook deliveries received, by outcome.",
            "# TYPE baton_deliveries_total counter",
        ]
        lines += [f'baton_deliveries_total{{outcome="{k}"}} {v}' for k, v in sorted(self.deliveries.items())]
        lines += [
            "# HELP baton_enqueue_seconds Time to store a task in Redis (script round trip).",
            "# TYPE baton_enqueue_seconds histogram",
            *self.enqueue_latency.lines("baton_enqueue_seconds"),
            "# HELP baton_queue_depth Jobs waiting in each queue (-1: Redis did not answer).",
            "# TYPE baton_queue_depth gauge",
        ]
        if redis is not None:
            for name, depth in sorted(redis.queue_depths.items()):
                lines.append(f'baton_queue_depth{{queue="{_label(name)}"}} {depth}')
            lines += [
                "# HELP baton_worker_events_total Events the workers counted, by name (from Redis).",
                "# TYPE baton_worker_events_total counter",
            ]
            for event, count in sorted(redis.worker_events.items()):
                lines.append(f'baton_worker_events_total{{event="{_label(event)}"}} {count}')
            lines += [
                "# HELP baton_outbox_pending Publications to GitHub not yet made (-1: Redis did not answer).",
                "# TYPE baton_outbox_pending gauge",
                f"baton_outbox_pending {redis.outbox_pending}",
                "# HELP baton_github_requests_total GitHub API calls the workers made, by task kind; "
                "rate_limited=false are 304s to conditional requests, which GitHub does not count.",
                "# TYPE baton_github_requests_total counter",
            ]
            for name, count in sorted(redis.github_requests.items()):
                kind, _, counted = name.rpartition(":")
                limited = "true" if counted == "counted" else "false"
                lines.append(
                    f'baton_github_requests_total{{kind="{_label(kind)}",rate_limited="{limited}"}} {count}'
                )
        return "\n".join(lines) + "\n"
