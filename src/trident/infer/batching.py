"""Continuous batching: requests join the running batch at the next token and leave it when done.

Each `step` first runs the prompts of newly admitted requests (one pass, each in its own cache slot,
which also yields their first token), then one token for every request already running. A request
holds a slot from admission until it finishes, is cancelled, or fails; the slot is then free for
the next waiting request. Requests report through callbacks (`on_token`, `on_done`), called on the
thread that calls `step`; a request's `on_token` returning True stops it (a stop sequence matched).
"""
from __future__ import annotations

import queue
import random
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable

from trident.infer.generate import sampling_bias
from trident.infer.plan import MAX_TOP_LOGPROBS, RowSpec, StepOutput, build_plan


@dataclass
class Request:
    prompt_ids: list[int]
    max_new_tokens: int
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    top_n: int = 0  # alternatives to report per token (0..MAX_TOP_LOGPROBS)
    echo: bool = False  # score the prompt's own tokens too
    stop_at_eod: bool = True
    stop_ids: frozenset[int] = frozenset()  # more end tokens (a chat model's own eos), obeyed as eod is
    presence_penalty: float = 0.0  # the OpenAI penalties and logit_bias (trident.infer.generate.sampling_bias)
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    on_token: Callable[["Request", int], bool] | None = None
    on_done: Callable[["Request"], None] | None = None
    # filled in as it runs
    new_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tops: list[list[tuple[int, float]]] = field(default_factory=list)
    prompt_logprobs: list[float | None] = field(default_factory=list)  # None for the first prompt token
    prompt_tops: list[list[tuple[int, float]]] = field(default_factory=list)
    finish_reason: str | None = None  # length | stop | cancelled | error
    cancelled: bool = False
    counts: Counter[int] = field(default_factory=Counter)  # generated tokens, kept only under penalties

    def __post_init__(self):
        if not self.prompt_ids:
            raise ValueError("prompt_ids must hold at least one token")
        if not 0 <= self.top_n <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_n must be in 0..{MAX_TOP_LOGPROBS}, got {self.top_n}")
        if self.temperature > 0 and self.seed is None:
            self.seed = random.SystemRandom().randrange(2**62)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None


class Scheduler:
    """Owns the engine's slots. Thread-safe `submit`; `step` from one thread only."""

    def __init__(self, engine, eod_id: int, broadcast_plan: bool = False):
        self.engine, self.eod_id, self.broadcast_plan = engine, eod_id, broadcast_plan
        self.incoming: queue.SimpleQueue[Request] = queue.SimpleQueue()
        self.waiting: deque[Request] = deque()
        self.running: dict[int, Request] = {}  # slot -> request
        self.free = list(range(engine.slots - 1, -1, -1))
        self.finished: Counter[str] = Counter()  # requests by finish reason

    def submit(self, request: Request) -> None:
        if len(request.prompt_ids) + request.max_new_tokens > self.engine.seq_length:  # 0 new: scoring only
            raise ValueError(f"prompt of {len(request.prompt_ids)} tokens + max_tokens {request.max_new_tokens} "
                             f"exceeds the context of {self.engine.seq_length} tokens")
        self.incoming.put(request)

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting or not self.incoming.empty())

    def step(self) -> bool:
        """One scheduling round; False when there was nothing to do."""
        while not self.incoming.empty():
            self.waiting.append(self.incoming.get())
        self._drop_cancelled()
        joining = {}
        while self.waiting and self.free:
            request = self.waiting.popleft()
            joining[self.free.pop()] = request
        running = dict(sorted(self.running.items()))  # slot order: a full batch reads its cache as one view
        joining = dict(sorted(joining.items()))
        if joining:
            self.running.update(joining)
            self._prefill(joining)
        if running:
            self._decode(running)
        return bool(joining or running)

    def run_until_done(self) -> None:
        while self.busy:
            self.step()

    def _drop_cancelled(self) -> None:
        for request in [r for r in self.waiting if r.cancelled]:
            self.waiting.remove(request)
            self._finish(None, request, "cancelled")
        for slot, request in list(self.running.items()):
            if request.cancelled:
                self._finish(slot, request, "cancelled")

    def _row(self, slot: int, request: Request, tokens: list[int], start: int, fresh: bool) -> RowSpec:
        bias = ()
        if request.logit_bias or request.presence_penalty or request.frequency_penalty:
            bias = tuple(sampling_bias(request.counts, request.presence_penalty, request.frequency_penalty,
                                       request.logit_bias).items())
        return RowSpec(slot, tokens, start, request.temperature, request.top_k, request.top_p, request.seed or 0,
                       fresh, echo=fresh and request.echo, top_n=request.top_n, bias=bias)

    def _prefill(self, joining: dict[int, Request]) -> None:
        rows = [self._row(slot, r, list(r.prompt_ids), 0, True) for slot, r in joining.items()]
        out = self._run(rows)
        for b, (slot, request) in enumerate(joining.items()):
            if request.echo:
                self._record_prompt(request, out, b)
            if request.max_new_tokens == 0:  # scoring only (echo): nothing to generate
                self._finish(slot, request, "length")
            else:
                self._accept(slot, request, out, b)

    def _decode(self, running: dict[int, Request]) -> None:
        running = {slot: r for slot, r in running.items() if not r.done}
        if not running:
            return
        rows = [self._row(slot, r, [r.new_ids[-1]], len(r.prompt_ids) + len(r.new_ids) - 1, False)
                for slot, r in running.items()]
        out = self._run(rows)
        for b, (slot, request) in enumerate(running.items()):
            self._accept(slot, request, out, b)

    def _run(self, rows: list[RowSpec]) -> StepOutput:
        plan = build_plan(rows, self.engine.seq_length, self.eod_id, self.engine.multiple)
        return self.engine.run(plan, broadcast_plan=self.broadcast_plan)

    def _record_prompt(self, request: Request, out: StepOutput, b: int) -> None:
        request.prompt_logprobs = [None] + [out.logprob(b, j) for j in range(len(request.prompt_ids) - 1)]
        request.prompt_tops = [[]] + [out.top(b, request.top_n, j) for j in range(len(request.prompt_ids) - 1)]

    def _accept(self, slot: int, request: Request, out: StepOutput, b: int) -> None:
        token = out.token(b)
        if request.stop_at_eod and (token == self.eod_id or token in request.stop_ids):
            self._finish(slot, request, "stop")
            return
        request.new_ids.append(token)
        if request.presence_penalty or request.frequency_penalty:
            request.counts[token] += 1
        request.logprobs.append(out.logprob(b))
        request.tops.append(out.top(b, request.top_n))
        stop = request.on_token(request, token) if request.on_token is not None else False
        if stop:
            self._finish(slot, request, "stop")
        elif len(request.new_ids) >= request.max_new_tokens:
            self._finish(slot, request, "length")
        elif len(request.prompt_ids) + len(request.new_ids) >= self.engine.seq_length:
            self._finish(slot, request, "length")  # the context is full

    def _finish(self, slot: int | None, request: Request, reason: str) -> None:
        request.finish_reason = reason
        self.finished[reason] += 1
        if slot is not None and self.running.get(slot) is request:
            del self.running[slot]
            self.free.append(slot)
        if request.on_done is not None:
            request.on_done(request)

    def fail_all(self, reason: str = "error") -> None:
        """Finish every request (the engine failed): their callers must not wait forever."""
        while not self.incoming.empty():
            self.waiting.append(self.incoming.get())
        for request in list(self.waiting):
            self._finish(None, request, reason)
        self.waiting.clear()
        for slot, request in list(self.running.items()):
            self._finish(slot, request, reason)


def generate_rows(engine, prompts: list[list[int]], max_new_tokens: int, eod_id: int, choose) -> list[list[int]]:
    """Lock-step batch generation with one rule for the whole batch: every row is fed every step until
    all have stopped at `eod_id` (as CausalLM.generate draws: choose(logits [b, V]) once a step, on
    the sampler). A prompt longer than the context leaves room for the new tokens by dropping its
    oldest tokens. Returns each row's new tokens (without the end-of-document token)."""
    if len(prompts) > engine.slots:
        raise ValueError(f"{len(prompts)} prompts but the engine has {engine.slots} slots")
    keep = max(1, engine.seq_length - max_new_tokens)
    prompts = [list(p[-keep:]) or [eod_id] for p in prompts]
    new: list[list[int]] = [[] for _ in prompts]
    done = [False] * len(prompts)
    rows = [RowSpec(b, p, 0, fresh=True) for b, p in enumerate(prompts)]
    for step in range(max_new_tokens):
        out = engine.run(build_plan(rows, engine.seq_length, eod_id, engine.multiple), choose=choose)
        for b in range(len(prompts)):
            token = out.token(b)
            if not done[b]:
                done[b] = token == eod_id
                if not done[b]:
                    new[b].append(token)
        if all(done) or any(len(p) + step >= engine.seq_length for p in prompts):  # context full
            break
        rows = [RowSpec(b, [out.token(b)], len(p) + step) for b, p in enumerate(prompts)]
    return new
