"""The OpenAI completions API as trident serves it: request validation (every mistake a 400 naming
its field) and the response objects, plain and streamed.

https://platform.openai.com/docs/api-reference/completions: `prompt` is a string, a list of
strings, a list of token ids or a list of lists of token ids; `logprobs` N reports, per token, its
own log-probability and the N most likely alternatives; `echo` repeats (and scores) the prompt.
`top_k` and `ignore_eos` (keep generating past <|endoftext|>) are extensions, as in vLLM.
`model` may name any model: one is served.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from trident.infer.plan import MAX_TOP_LOGPROBS

FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "logprobs", "echo",
          "stream", "n", "user", "ignore_eos"}
MAX_STOPS = 4


class BadRequest(ValueError):
    """An invalid request: answered 400 with this message (which names the field)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass
class Completion:
    prompts: list[list[int]]  # one token list per prompt
    prompt_texts: list[str | None]  # the prompt as given, when it was text
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: int | None = None
    echo: bool = False
    stream: bool = False
    ignore_eos: bool = False


def _number(body: dict, name: str, default, low: float, high: float, integer: bool = False):
    value = body.get(name, default)
    if value is None:
        return default
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise BadRequest(name, f"must be {'an integer' if integer else 'a number'}, got {type(value).__name__}")
    if not low <= value <= high:
        raise BadRequest(name, f"must be in [{low}, {high}], got {value}")
    return value


def _flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(name, f"must be true or false, got {type(value).__name__}")
    return value


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


def _stops(value) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise BadRequest("stop", "must be a non-empty string or a list of non-empty strings")
    if len(stops) > MAX_STOPS:
        raise BadRequest("stop", f"at most {MAX_STOPS} stop sequences, got {len(stops)}")
    return tuple(stops)


def parse_completion(body, tokenizer, context: int) -> Completion:
    """A validated Completion from a decoded JSON body, or BadRequest naming the field."""
    if not isinstance(body, dict):
        raise BadRequest("body", f"must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise BadRequest(unknown[0], f"unknown field (known: {', '.join(sorted(FIELDS))})")
    for name in ("model", "user"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise BadRequest(name, f"must be a string, got {type(body[name]).__name__}")
    if _number(body, "n", 1, 1, 1, integer=True) != 1:
        raise BadRequest("n", "only n=1 is served")
    prompts, texts = parse_prompts(body.get("prompt"), tokenizer)
    request = Completion(prompts, texts, max_tokens=_number(body, "max_tokens", 16, 1, context, integer=True),
                         temperature=float(_number(body, "temperature", 1.0, 0.0, 2.0)),
                         top_p=float(_number(body, "top_p", 1.0, 0.0, 1.0)),
                         top_k=_number(body, "top_k", 0, -1, tokenizer.vocab_size, integer=True),
                         seed=_number(body, "seed", None, -2**63, 2**63 - 1, integer=True),
                         stop=_stops(body.get("stop")),
                         logprobs=_number(body, "logprobs", None, 0, MAX_TOP_LOGPROBS, integer=True),
                         echo=_flag(body, "echo"), stream=_flag(body, "stream"),
                         ignore_eos=_flag(body, "ignore_eos"))
    if request.top_p == 0:
        raise BadRequest("top_p", "must be greater than 0")
    request.top_k = max(request.top_k, 0)  # -1 (vLLM's "off") is 0 here
    for i, ids in enumerate(prompts):
        where = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
        if len(ids) >= context:
            raise BadRequest(where, f"{len(ids)} tokens leave no room in the context of {context} tokens")
        if len(ids) + request.max_tokens > context:
            raise BadRequest("max_tokens", f"{len(ids)} prompt tokens + max_tokens {request.max_tokens} exceed "
                                           f"the context of {context} tokens (at most {context - len(ids)})")
    return request


# ---- responses ---------------------------------------------------------------------------------------
def completion_id() -> str:
    return f"cmpl-{uuid.uuid4().hex}"


def envelope(ident: str, model: str, choices: list[dict], usage: dict | None = None) -> dict:
    body = {"id": ident, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": choices}
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
