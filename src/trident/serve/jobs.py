"""One generated sequence (one choice) of a request, between the HTTP handler (asyncio) and the
engine thread.

The engine thread calls `_on_token` / `_on_done`; they only update plain fields and wake the
handler through its event loop (`call_soon_threadsafe`), so no lock is needed. Stop sequences are
matched on the decoded text: generation stops at the first token whose text completes one, and the
text is cut before it. While streaming, text that could still turn into a stop sequence (or an
unfinished UTF-8 character) is held back until it cannot. How a choice is written out (completions'
`text`, chat's `message` / `delta`) is each API's own (serve/protocol.py, serve/chat.py).
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from trident.infer.batching import Request
from trident.serve.fields import Sampling

REPLACEMENT = "\ufffd"  # what a byte-level decode shows for an unfinished multi-byte character


@dataclass
class Piece:
    """What a stream sends next for one choice: new text, generated tokens [first, last), and
    whether it is the choice's first piece (which carries an echoed prompt) or its last."""
    text: str
    first: int
    last: int
    opening: bool
    final: bool


class Job:
    def __init__(self, loop: asyncio.AbstractEventLoop, tokenizer, ids: list[int], text: str | None,
                 sampling: Sampling, seed: int | None, stop_ids: frozenset[int] = frozenset()):
        self.loop, self.tokenizer = loop, tokenizer
        self.prompt_text = tokenizer.decode(ids) if text is None else text
        self.stops, self.top_n, self.echo = sampling.stop, sampling.logprobs, sampling.echo
        self.streaming = sampling.stream
        self.changed = asyncio.Event()
        self.finished = asyncio.Event()
        self.text = ""  # the continuation so far, cut at a stop sequence
        self.sent_chars = self.sent_tokens = 0
        self.started = False  # the first streamed piece (which carries an echoed prompt) is out
        self.created, self.first_token_at = time.monotonic(), None
        self.request = Request(list(ids), sampling.max_tokens, sampling.temperature, sampling.top_k, sampling.top_p,
                               seed, top_n=sampling.logprobs or 0, echo=sampling.echo,
                               stop_at_eod=not sampling.ignore_eos, stop_ids=stop_ids,
                               presence_penalty=sampling.presence_penalty,
                               frequency_penalty=sampling.frequency_penalty, logit_bias=sampling.logit_bias,
                               on_token=self._on_token, on_done=self._on_done)

    # ---- engine thread --------------------------------------------------------------------------
    def _on_token(self, request: Request, token: int) -> bool:
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()
        if not (self.stops or self.streaming):  # nothing to decide or send before the end
            return False
        text = self.tokenizer.decode(request.new_ids)
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        self.text = text if cut < 0 else text[:cut]
        if self.streaming:
            self.loop.call_soon_threadsafe(self.changed.set)
        return cut >= 0

    def _on_done(self, request: Request) -> None:
        if not (self.stops or self.streaming):
            self.text = self.tokenizer.decode(request.new_ids)
        self.loop.call_soon_threadsafe(self._finish)

    def _finish(self) -> None:
        self.finished.set()
        self.changed.set()

    # ---- handler ----------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.finished.is_set()

    @property
    def finish_reason(self) -> str | None:
        return self.request.finish_reason

    def cancel(self) -> None:
        self.request.cancelled = True

    def kept_tokens(self) -> int:
        """Generated tokens whose text is (within) the reported text: a stop sequence's tokens are not."""
        ids = self.request.new_ids
        if not self.stops or self.request.finish_reason != "stop":
            return len(ids)
        kept = 0
        while kept < len(ids) and len(self.tokenizer.decode(ids[: kept + 1])) <= len(self.text):
            kept += 1
        return kept

    def cumulative_logprob(self) -> float:
        """The model's log-probability of the kept tokens (how best_of ranks sequences)."""
        return sum(self.request.logprobs[: self.kept_tokens()])

    def safe_text(self) -> str:
        """The text that can be streamed now (all of it once done)."""
        text = self.text
        if self.done:
            return text
        hold = 0
        for stop in self.stops:  # a tail that is a stop sequence's beginning may still become it
            for size in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:size]):
                    hold = max(hold, size)
                    break
        safe = text[: len(text) - hold]
        return safe.rstrip(REPLACEMENT)

    def take(self) -> Piece | None:
        """The streamed piece since the last one (None when there is nothing new to send)."""
        opening = not self.started
        text = self.safe_text()
        tokens = self.kept_tokens() if self.done else len(self.request.new_ids)
        delta = text[self.sent_chars:]
        if not delta and not self.done and not (opening and self.echo):  # held-back tokens go with the next text
            return None
        self.started = True
        piece = Piece(delta, self.sent_tokens, tokens, opening, self.done)
        self.sent_chars, self.sent_tokens = len(text), tokens
        return piece

    def token_entries(self, first: int, last: int, prompt: bool = False) -> tuple[list, list, list]:
        """(ids, logprobs, top alternatives) of generated tokens [first, last), after the prompt's when asked."""
        r = self.request
        ids, lps, tops = r.new_ids[first:last], r.logprobs[first:last], r.tops[first:last]
        if prompt:
            ids, lps, tops = list(r.prompt_ids) + ids, r.prompt_logprobs + lps, r.prompt_tops + tops
        return ids, lps, tops
