"""When a slow rank is named: only when it is slow consistently, beyond the noise, at a material cost.

`find_stragglers` (stragglers.py) says, for one check, which ranks are slower than their peers and what
each costs. One check is not evidence: on a busy host a healthy rank is descheduled for tens of
milliseconds, several times a small model's compute, and one check would name it. A rank is named
only when, in each of the last `straggler_checks` checks:
  - its compute exceeds its peers' median by more than `straggler_pct` and by more than NOISE_SIGMAS
    robust standard deviations of its peers' compute over the last HISTORY checks: the noise band. It
    comes from the peers' history, not from their spread within one check, because with dp 2 a rank
    has a single peer; until MIN_NOISE_TIMES peer times are in, no band is known and nobody is named.
    The band and the excess are per micro-batch (compute / the step's micro-batches): during a batch-size
    ramp (MT-NLG's 32 -> 1920 sequences, docs/reference.md) a step's compute grows 60-fold, and a band over
    raw step times would be as wide as the ramp and hide a real straggler;
  - the seconds it costs a step (the simulator's estimate) are at least `straggler_min_cost_pct` of
    the step: a rank that is slower but waited for by nobody (its stage has slack) costs nothing.
"""
from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

from trident.train.stragglers import compute_time, find_stragglers, peers_of

NOISE_SIGMAS = 5.0  # scheduling noise is heavy-tailed: 3 sigmas are crossed by healthy ranks on a busy host
HISTORY = 10  # checks whose peer times the noise band is measured over
MIN_NOISE_TIMES = 4  # fewer peer times than this measure no band: nobody is named yet (with dp 2, 4 checks)
MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation per median absolute deviation


@dataclass(frozen=True)
class Check:
    """What one straggler check measured: the step's seconds, each rank's compute per micro-batch and
    its peers, and the ranks `find_stragglers` found slower than their peers (by rank)."""
    step_seconds: float
    computes: dict[int, float]
    peers: dict[int, tuple[int, ...]]
    found: dict[int, dict]


class StragglerWatch:
    """Fed every check's reports on rank 0; returns the ranks named at that check."""

    def __init__(self, pct: float, checks: int, min_cost_pct: float, **pipeline):
        self.pct, self.checks, self.min_cost = pct, checks, min_cost_pct / 100
        self.pipeline = pipeline  # schedule, virtual_stages, contract: for the cost estimate
        self.history: deque[Check] = deque(maxlen=max(HISTORY, checks))

    def observe(self, reports: list[dict], step_seconds: float, micro_batches: int = 1) -> list[dict]:
        """Each named rank: find_stragglers' entry at this check plus `slow_checks`, the consecutive
        checks it has been slow in (>= straggler_checks)."""
        found = find_stragglers(reports, self.pct, micro_batches=micro_batches, **self.pipeline)
        self.history.append(Check(step_seconds, {r["rank"]: compute_time(r) / micro_batches for r in reports},
                                  {r["rank"]: tuple(p["rank"] for p in peers_of(r, reports)) for r in reports},
                                  {f["rank"]: f for f in found}))
        named = []
        for rank, entry in self.history[-1].found.items():
            streak = self.slow_streak(rank)
            if streak >= self.checks:
                named.append(entry | {"slow_checks": streak})
        return named

    def slow_streak(self, rank: int) -> int:
        """How many of the latest checks in a row found `rank` slow beyond the noise at a material cost."""
        noise = self.peer_noise(rank)
        if noise is None:
            return 0
        band, streak = NOISE_SIGMAS * noise, 0
        for check in reversed(self.history):
            entry = check.found.get(rank)
            peers = [check.computes[p] for p in check.peers[rank]]
            if (entry is None or check.computes[rank] - statistics.median(peers) <= band
                    or entry["seconds_lost_per_step"] < self.min_cost * check.step_seconds):
                break
            streak += 1
        return streak

    def peer_noise(self, rank: int) -> float | None:
        """A robust standard deviation (MAD-based) of `rank`'s peers' compute per micro-batch over the kept
        checks; None while fewer than MIN_NOISE_TIMES are kept."""
        times = [check.computes[p] for check in self.history for p in check.peers[rank]]
        if len(times) < MIN_NOISE_TIMES:
            return None
        middle = statistics.median(times)
        return MAD_TO_SIGMA * statistics.median(abs(t - middle) for t in times)
