"""One prompt of a completion request, between the HTTP handler (asyncio) and the engine thread.

The engine thread calls `_on_token` / `_on_done`; they only update plain fields and wake the
handler through its event loop (`call_soon_threadsafe`), so no lock is needed. Stop sequences are
matched on the decoded text: generation stops at the first token whose text completes one, and the
text is cut before it. While streaming, text that could still turn into a stop sequence (or an
unfinished UTF-8 character) is held back until it cannot.
"""
from __future__ import annotations

import asyncio

from trident.infer.batching import Request
from trident.serve.protocol import Completion, logprobs_block

REPLACEMENT = "\ufffd"  # what a byte-level decode shows for an unfinished multi-byte character


class Job:
    def __init__(self, loop: asyncio.AbstractEventLoop, tokenizer, index: int, ids: list[int], text: str | None,
                 completion: Completion):
        self.loop, self.tokenizer, self.index = loop, tokenizer, index
        self.prompt_text = tokenizer.decode(ids) if text is None else text
        self.stops = completion.stop
        self.top_n = completion.logprobs
        self.echo = completion.echo
        self.streaming = completion.stream
        self.changed = asyncio.Event()
        self.finished = asyncio.Event()
        self.text = ""  # the continuation so far, cut at a stop sequence
        self.sent_chars = self.sent_tokens = 0
        self.started = False  # the first streamed chunk (which carries an echoed prompt) is out
        self.request = Request(list(ids), completion.max_tokens, completion.temperature, completion.top_k,
                               completion.top_p, completion.seed, top_n=completion.logprobs or 0,
                               echo=completion.echo, stop_at_eod=not completion.ignore_eos,
                               on_token=self._on_token, on_done=self._on_done)

    # ---- engine thread --------------------------------------------------------------------------
    def _on_token(self, request: Request, token: int) -> bool:
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

    def logprobs(self, first: int, last: int, include_prompt: bool) -> dict | None:
        """The logprobs object for generated tokens [first, last) (and the prompt's, when echoing)."""
        if self.top_n is None:
            return None
        r = self.request
        ids, lps, tops = r.new_ids[first:last], r.logprobs[first:last], r.tops[first:last]
        offset = len(self.prompt_text) if self.echo else 0
        offset += len(self.tokenizer.decode(r.new_ids[:first])) if first else 0
        if include_prompt:
            ids, lps, tops = list(r.prompt_ids) + ids, r.prompt_logprobs + lps, r.prompt_tops + tops
            offset = 0
        return logprobs_block(self.tokenizer, ids, lps, tops, offset)

    def choice(self) -> dict:
        """The whole choice of a plain (not streamed) response."""
        text = (self.prompt_text if self.echo else "") + self.text
        return {"text": text, "index": self.index, "logprobs": self.logprobs(0, self.kept_tokens(), self.echo),
                "finish_reason": self.finish_reason}

    def next_chunk(self) -> dict | None:
        """The streamed choice delta since the last one (None when there is nothing new to send)."""
        first_chunk = not self.started
        text = self.safe_text()
        tokens = self.kept_tokens() if self.done else len(self.request.new_ids)
        delta = text[self.sent_chars:]
        if self.echo and first_chunk:
            delta = self.prompt_text + delta
        final = self.done
        if not delta and not final:  # tokens whose text is held back go out with the next text
            return None
        self.started = True
        logprobs = self.logprobs(self.sent_tokens, tokens, self.echo and first_chunk)
        self.sent_chars, self.sent_tokens = len(text), tokens
        return {"text": delta, "index": self.index, "logprobs": logprobs,
                "finish_reason": self.finish_reason if final else None}
