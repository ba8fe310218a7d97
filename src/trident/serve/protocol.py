"""The OpenAI completions API as trident serves it: the request (validated by serve/fields.py) and
the response objects, plain and streamed.

https://platform.openai.com/docs/api-reference/completions: `prompt` is a string, a list of
strings, a list of token ids or a list of lists of token ids; `logprobs` N reports, per token, its
own log-probability and the N most likely alternatives; `echo` repeats (and scores) the prompt, and
with `max_tokens=0` only scores it. `n` choices per prompt (choice i sampled with seed + i);
`best_of` sequences per prompt of which the n with the highest cumulative log-probability are
returned. `top_k` and `ignore_eos` are extensions, as in vLLM. `model` may name any model: one is served.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from trident.serve import fields
from trident.serve.fields import BadRequest, Sampling

MAX_LOGPROBS = 5  # as the OpenAI completions API caps `logprobs`
FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "logprobs", "echo",
          "stream", "stream_options", "n", "best_of", "user", "ignore_eos", "presence_penalty", "frequency_penalty",
          "logit_bias", "suffix"}


@dataclass
class Completion:
    prompts: list[list[int]]  # one token list per prompt
    prompt_texts: list[str | None]  # the prompt as given, when it was text
    sampling: Sampling


def _token_list(value: list, name: str, vocab_size: int) -> list[int]:
    if not value:
        raise BadRequest(name, "a token list must not be empty")
    for token in value:
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab_size:
            raise BadRequest(name, f"token ids must be integers in [0, {vocab_size}), got {token!r}")
    return list(value)


def parse_prompts(value, tokenizer) -> tuple[list[list[int]], list[str | None]]:
    """(token ids, text or None) per prompt; an empty text prompt starts a new document."""
    if value is None:
        raise BadRequest("prompt", "is required")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise BadRequest("prompt", "must be a string, a list of strings, a list of token ids or a list of them")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [_token_list(value, "prompt", tokenizer.vocab_size)], [None]
    ids, texts = [], []
    for i, item in enumerate(value):
        if isinstance(item, str):
            ids.append(tokenizer.encode(item) or [tokenizer.eod_id])
            texts.append(item)
        elif isinstance(item, list):
            ids.append(_token_list(item, f"prompt[{i}]", tokenizer.vocab_size))
            texts.append(None)
        else:
            raise BadRequest(f"prompt[{i}]", f"must be a string or a list of token ids, got {type(item).__name__}")
    return ids, texts


def _choices(body: dict, sampling: Sampling) -> None:
    sampling.best_of = fields.number(body, "best_of", sampling.n, 1, fields.MAX_N, integer=True)
    if sampling.best_of < sampling.n:
        raise BadRequest("best_of", f"must be >= n ({sampling.n}), got {sampling.best_of}")
    if sampling.stream and sampling.best_of > sampling.n:
        raise BadRequest("best_of", "best_of > n cannot stream: the best are known only at the end")


def parse_completion(body, tokenizer, context: int) -> Completion:
    """A validated Completion from a decoded JSON body, or BadRequest naming the field."""
    fields.check_fields(body, FIELDS)
    sampling = fields.parse_sampling(body, tokenizer.vocab_size)
    if body.get("suffix") is not None:
        raise BadRequest("suffix", "this model has no fill-in-the-middle (infill): send null or leave it out")
    _choices(body, sampling)
    sampling.logprobs = fields.number(body, "logprobs", None, 0, MAX_LOGPROBS, integer=True)
    sampling.echo = fields.flag(body, "echo")
    sampling.max_tokens = fields.number(body, "max_tokens", 16, 0, context, integer=True)
    if sampling.max_tokens == 0 and not sampling.echo:
        raise BadRequest("max_tokens", "0 (score the prompt only) needs echo=true; otherwise ask for >= 1 token")
    prompts, texts = parse_prompts(body.get("prompt"), tokenizer)
    for i, ids in enumerate(prompts):
        fields.check_room("prompt" if len(prompts) == 1 else f"prompt[{i}]", len(ids), sampling.max_tokens, context)
    return Completion(prompts, texts, sampling)


# ---- responses ---------------------------------------------------------------------------------------
def completion_id(prefix: str = "cmpl") -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def envelope(ident: str, model: str, choices: list[dict], usage: dict | None = None,
             kind: str = "text_completion") -> dict:
    body = {"id": ident, "object": kind, "created": int(time.time()), "model": model, "choices": choices}
    if usage is not None:
        body["usage"] = usage
    return body


def logprobs_block(tokenizer, ids: list[int], logprobs: list[float | None], tops: list[list[tuple[int, float]]],
                   start_offset: int) -> dict:
    """OpenAI's legacy logprobs object for these tokens (top_logprobs keyed by token text)."""
    tokens, offsets, offset = [], [], start_offset
    for token in ids:
        text = tokenizer.decode([token])
        tokens.append(text)
        offsets.append(offset)
        offset += len(text)
    top_dicts = [None if lp is None else {tokenizer.decode([t]): v for t, v in top} for lp, top in zip(logprobs, tops)]
    return {"tokens": tokens, "token_logprobs": list(logprobs), "top_logprobs": top_dicts, "text_offset": offsets}


def _logprobs(job, first: int, last: int, with_prompt: bool) -> dict | None:
    if job.top_n is None:
        return None
    offset = 0 if with_prompt else (len(job.prompt_text) if job.echo else 0) + len(
        job.tokenizer.decode(job.request.new_ids[:first]))
    return logprobs_block(job.tokenizer, *job.token_entries(first, last, with_prompt), offset)


def completion_choice(job, index: int) -> dict:
    """The whole choice of a plain (not streamed) response."""
    text = (job.prompt_text if job.echo else "") + job.text
    return {"text": text, "index": index, "logprobs": _logprobs(job, 0, job.kept_tokens(), job.echo),
            "finish_reason": job.finish_reason}


def completion_chunk(job, piece, index: int) -> dict:
    """A streamed choice: the new text (after the echoed prompt in the first piece)."""
    echoed = job.echo and piece.opening
    text = (job.prompt_text if echoed else "") + piece.text
    return {"text": text, "index": index, "logprobs": _logprobs(job, piece.first, piece.last, echoed),
            "finish_reason": job.finish_reason if piece.final else None}
