"""GET /metrics: the server's counters in the Prometheus text exposition format (version 0.0.4),
written here (the format is a few lines of text; prometheus_client would be one more dependency).

trident_serve_requests_total{route, status}    answers by route and HTTP status (errors included)
trident_serve_prompt_tokens_total              prompt tokens of accepted requests (once per prompt)
trident_serve_generation_tokens_total          tokens generated (every sequence, best_of's too)
trident_serve_requests_running / _waiting      sequences holding a KV-cache slot / queued for one
trident_serve_slots                            KV-cache slots (--max-batch)
trident_serve_time_to_first_token_seconds      histogram: request arrival to its first generated token
"""
from __future__ import annotations

import threading
from collections import Counter

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "trident_serve_"


def _labels(**labels) -> str:
    escaped = {k: str(v).replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n") for k, v in labels.items()}
    return "{" + ",".join(f'{k}="{v}"' for k, v in escaped.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


class Metrics:
    """Counters updated from the event loop (and read there); a lock keeps a scrape consistent."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests: Counter[tuple[str, int]] = Counter()
        self.prompt_tokens = self.generation_tokens = 0
        self.ttft_counts = [0] * len(TTFT_BUCKETS)
        self.ttft_sum, self.ttft_count = 0.0, 0

    def answered(self, route: str, status: int) -> None:
        with self.lock:
            self.requests[(route, status)] += 1

    def tokens(self, prompt: int, generated: int) -> None:
        with self.lock:
            self.prompt_tokens += prompt
            self.generation_tokens += generated

    def first_token(self, seconds: float) -> None:
        with self.lock:
            for i, bound in enumerate(TTFT_BUCKETS):
                if seconds <= bound:
                    self.ttft_counts[i] += 1
            self.ttft_sum += seconds
            self.ttft_count += 1

    def render(self, load: dict) -> str:
        """The exposition text; `load` is the engine's running / waiting / slots."""
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            lines.extend([f"# HELP {PREFIX}{name} {help_text}", f"# TYPE {PREFIX}{name} {kind}"])
            lines.extend(f"{PREFIX}{sample} {_number(value)}" for sample, value in samples)

        with self.lock:
            family("requests_total", "counter", "HTTP answers by route and status.",
                   [(f"requests_total{_labels(route=route, status=status)}", count)
                    for (route, status), count in sorted(self.requests.items())])
            family("prompt_tokens_total", "counter", "Prompt tokens of accepted requests.",
                   [("prompt_tokens_total", self.prompt_tokens)])
            family("generation_tokens_total", "counter", "Tokens generated.",
                   [("generation_tokens_total", self.generation_tokens)])
            buckets = [(f"time_to_first_token_seconds_bucket{_labels(le=bound)}", count)
                       for bound, count in zip(TTFT_BUCKETS, self.ttft_counts)]
            buckets += [(f'time_to_first_token_seconds_bucket{_labels(le="+Inf")}', self.ttft_count),
                        ("time_to_first_token_seconds_sum", self.ttft_sum),
                        ("time_to_first_token_seconds_count", self.ttft_count)]
            family("time_to_first_token_seconds", "histogram", "Request arrival to its first generated token.",
                   buckets)
        family("requests_running", "gauge", "Sequences holding a KV-cache slot.",
               [("requests_running", load["running"])])
        family("requests_waiting", "gauge", "Sequences queued for a slot.", [("requests_waiting", load["waiting"])])
        family("slots", "gauge", "KV-cache slots (--max-batch).", [("slots", load["slots"])])
        return "\n".join(lines) + "\n"
