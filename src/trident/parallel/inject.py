"""The one fault-injection mechanism: `TRIDENT_INJECT` names faults that ranks inflict on themselves,
for tests, benchmarks and fire drills on a real cluster. Nothing happens when it is unset.

    TRIDENT_INJECT="rank=1,step=4,kind=sigterm"            one fault
    TRIDENT_INJECT="rank=0,step=3,kind=slow:0.2;rank=1,step=5,kind=exit"   several, separated by ';'

Keys: `rank` (global rank), `step` (the step about to run, as numbered in metrics.jsonl), `kind`, and
optionally `attempt` (the torchrun restart the fault belongs to: 0, the default, fires on a job's first
attempt only so a restarted job can recover; `any` fires on every attempt) and `at` (`step`, the default:
before the step; `send`: before the rank's first pipeline send of the step, for pp > 1). Kinds:
  sigterm | sigusr1 | sigint | sigusr2   the rank signals itself (preemption drills, a flight dump)
  exit[:CODE]                            the rank exits at once (default code 1), as a crashed process
  kill                                   the rank SIGKILLs itself (no handler, no cleanup)
  hang                                   the rank stops making progress
  slow:SECONDS                           every forward of the rank's model chunks takes SECONDS longer
                                         from `step` on: a slow GPU
  bitflip                                after the step's update the rank flips one bit of its first
                                         parameter (`param=NAME` picks another): silent corruption
The value is parsed and checked once, at start; a malformed one is a configuration error (exit 2).
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass


ENV = "TRIDENT_INJECT"
SIGNALS = {"sigterm": signal.SIGTERM, "sigusr1": signal.SIGUSR1, "sigint": signal.SIGINT, "sigusr2": signal.SIGUSR2}
KINDS = (*SIGNALS, "exit", "kill", "hang", "slow", "bitflip")
KEYS = ("rank", "step", "kind", "attempt", "param", "at")
POINTS = ("step", "send")


class InjectError(ValueError):
    """A malformed TRIDENT_INJECT value; the message quotes the part at fault."""


@dataclass(frozen=True)
class Fault:
    rank: int
    step: int
    kind: str
    value: float = 0.0  # slow: seconds a step; exit: the exit code
    attempt: int | None = 0  # None: every attempt
    param: str = ""  # bitflip: which parameter ("" = this rank's first)
    at: str = "step"  # step | send: where a signal, exit, kill or hang strikes


def _integer(text: str, key: str, part: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InjectError(f"{ENV}: '{part}': {key} must be an integer, got {text!r}") from None


def _fault(part: str) -> Fault:
    fields = {}
    for item in part.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or key not in KEYS:
            raise InjectError(f"{ENV}: '{part}': expected key=value with keys {', '.join(KEYS)}, got {item.strip()!r}")
        fields[key] = value.strip()
    missing = [key for key in ("rank", "step", "kind") if key not in fields]
    if missing:
        raise InjectError(f"{ENV}: '{part}': missing {', '.join(missing)}")
    kind, _, argument = fields["kind"].partition(":")
    if kind not in KINDS:
        raise InjectError(f"{ENV}: '{part}': kind must be one of {', '.join(KINDS)}, got {kind!r}")
    value = 0.0
    if kind == "slow":
        try:
            value = float(argument)
        except ValueError:
            raise InjectError(f"{ENV}: '{part}': slow needs seconds, e.g. slow:0.3") from None
    elif kind == "exit":
        value = _integer(argument or "1", "the exit code", part)
    elif argument:
        raise InjectError(f"{ENV}: '{part}': kind {kind} takes no argument")
    attempt, at = fields.get("attempt", "0"), fields.get("at", "step")
    if at not in POINTS or (at != "step" and kind in ("slow", "bitflip")):
        raise InjectError(f"{ENV}: '{part}': at must be one of {', '.join(POINTS)} (slow and bitflip: step)")
    return Fault(rank=_integer(fields["rank"], "rank", part), step=_integer(fields["step"], "step", part),
                 kind=kind, value=value, attempt=None if attempt == "any" else _integer(attempt, "attempt", part),
                 param=fields.get("param", ""), at=at)


def parse(text: str) -> list[Fault]:
    """The faults a TRIDENT_INJECT value names (InjectError when malformed)."""
    return [_fault(part) for part in text.split(";") if part.strip()]


class Injector:
    """This rank's faults for this attempt; the training loop calls `before_step` and `after_update`."""

    def __init__(self, faults: list[Fault], rank: int, attempt: int = 0):
        self.faults = [f for f in faults if f.rank == rank and f.attempt in (None, attempt)]
        self.fired: set[Fault] = set()  # a fault strikes once (at=send: before the step's first send)

    @classmethod
    def from_env(cls, rank: int) -> "Injector":
        return cls(parse(os.environ.get(ENV, "")), rank, int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))

    def __bool__(self) -> bool:
        return bool(self.faults)

    def before_step(self, step: int) -> None:
        """Inflict this rank's faults due before `step` runs."""
        self._strike(step, "step")

    def before_send(self, step: int) -> None:
        """Inflict this rank's faults due before its first pipeline send of `step`."""
        self._strike(step, "send")

    def wants(self, at: str) -> bool:
        return any(f.at == at for f in self.faults)

    def slow_seconds(self, step: int) -> float:
        """Extra seconds each forward of this rank takes during `step`."""
        return sum(f.value for f in self.faults if f.kind == "slow" and step >= f.step)

    def _strike(self, step: int, at: str) -> None:
        for fault in self.faults:
            if fault.step != step or fault.at != at or fault in self.fired:
                continue
            self.fired.add(fault)
            if fault.kind in SIGNALS:
                os.kill(os.getpid(), SIGNALS[fault.kind])
            elif fault.kind == "exit":
                os._exit(int(fault.value))
            elif fault.kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif fault.kind == "hang":
                while True:  # signal handlers (a flight-recorder dump) still run while it sleeps
                    time.sleep(1.0)

    def after_update(self, step: int, named_params: list) -> str | None:
        """Flip one bit of a parameter when a bitflip is due after `step`; returns its name."""
        for fault in self.faults:
            if fault.kind == "bitflip" and fault.step == step:
                name, param = next(((n, p) for n, p in named_params if n == fault.param or not fault.param),
                                   (None, None))
                if param is None:
                    raise InjectError(f"{ENV}: rank {fault.rank} holds no parameter named {fault.param!r}")
                flip_bit(param)
                return name
        return None


def flip_bit(tensor, element: int = 0, bit: int = 20) -> None:
    """XOR one bit of one element in place (a mantissa bit by default: the value stays finite)."""
    import torch  # here, not at the top: a launcher parses TRIDENT_INJECT without loading torch

    flat = tensor.detach().view(-1)
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
    word = flat[element:element + 1].view(as_int)
    word ^= 1 << (bit % (8 * flat.element_size()))
