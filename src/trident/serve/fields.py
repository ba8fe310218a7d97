"""Request fields the completions and chat APIs share: validation (every mistake a 400 naming its
field) and the sampling settings they become.

Every field the OpenAI API defines is known: a field that changes the result is implemented
(`n`, `best_of`, the penalties, `logit_bias`, `seed`, `stream_options.include_usage`); one that
cannot apply to this model is accepted at its default value and refused otherwise, naming the field.
"""
from __future__ import annotations

from dataclasses import dataclass, field

MAX_STOPS = 4
MAX_N = 16  # choices (and best_of sequences) per prompt: each holds a KV-cache slot
MAX_BIAS_TOKENS = 300  # as the OpenAI API caps logit_bias
SEED_RANGE = (-2**63, 2**63 - 1)


class BadRequest(ValueError):
    """An invalid request: answered 400 with this message (which names the field)."""

    def __init__(self, field: str | None, message: str, code: str | None = None):
        super().__init__(f"{field}: {message}" if field else message)
        self.field, self.code = field, code


@dataclass
class Sampling:
    """How each choice of one request is generated and reported."""
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    n: int = 1
    best_of: int = 1
    logprobs: int | None = None  # alternatives reported per token; None: no logprobs at all
    echo: bool = False
    stream: bool = False
    include_usage: bool = False
    ignore_eos: bool = False
    user: str | None = None


def number(body: dict, name: str, default, low: float, high: float, integer: bool = False):
    value = body.get(name, default)
    if value is None:
        return default
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise BadRequest(name, f"must be {'an integer' if integer else 'a number'}, got {type(value).__name__}")
    if not low <= value <= high:
        raise BadRequest(name, f"must be in [{low}, {high}], got {value}")
    return value


def flag(body: dict, name: str, default: bool = False) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(name, f"must be true or false, got {type(value).__name__}")
    return value


def text(body: dict, name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRequest(name, f"must be a string, got {type(value).__name__}")
    return value


def only_default(body: dict, name: str, allowed: tuple, why: str) -> None:
    """A field this model cannot honour: accepted at a value that asks for nothing, else refused."""
    if name in body and body[name] not in allowed:
        raise BadRequest(name, f"{why}; accepted values: {', '.join(repr(a) for a in allowed)}")


def check_fields(body, known: set[str]) -> None:
    if not isinstance(body, dict):
        raise BadRequest("body", f"must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - known)
    if unknown:
        raise BadRequest(unknown[0], f"unknown field (known: {', '.join(sorted(known))})")


def stops(value) -> tuple[str, ...]:
    if value is None:
        return ()
    listed = [value] if isinstance(value, str) else value
    if not isinstance(listed, list) or not all(isinstance(s, str) and s for s in listed):
        raise BadRequest("stop", "must be a non-empty string or a list of non-empty strings")
    if len(listed) > MAX_STOPS:
        raise BadRequest("stop", f"at most {MAX_STOPS} stop sequences, got {len(listed)}")
    return tuple(listed)


def logit_bias(value, vocab_size: int) -> dict[int, float]:
    """{"token id": bias in [-100, 100]} as OpenAI defines it (JSON keys are strings)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest("logit_bias", f"must be an object of token id -> bias, got {type(value).__name__}")
    if len(value) > MAX_BIAS_TOKENS:
        raise BadRequest("logit_bias", f"at most {MAX_BIAS_TOKENS} tokens, got {len(value)}")
    bias = {}
    for key, amount in value.items():
        try:
            token = int(key)
        except ValueError:
            raise BadRequest("logit_bias", f"keys must be token ids, got {key!r}") from None
        if not 0 <= token < vocab_size:
            raise BadRequest("logit_bias", f"token id {token} is outside the vocabulary [0, {vocab_size})")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not -100 <= amount <= 100:
            raise BadRequest("logit_bias", f"the bias of token {token} must be a number in [-100, 100], got {amount!r}")
        bias[token] = float(amount)
    return bias


def stream_options(body: dict, stream: bool) -> bool:
    """include_usage: a last chunk with the usage (and `usage: null` on every other chunk)."""
    value = body.get("stream_options")
    if value is None:
        return False
    if not stream:
        raise BadRequest("stream_options", "is only allowed when stream is true")
    if not isinstance(value, dict) or set(value) - {"include_usage", "continuous_usage_stats"}:
        raise BadRequest("stream_options", "must be an object with include_usage (true or false)")
    include = value.get("include_usage")
    if include is not None and not isinstance(include, bool):
        raise BadRequest("stream_options.include_usage", f"must be true or false, got {type(include).__name__}")
    return bool(include)


def parse_sampling(body: dict, vocab_size: int) -> Sampling:
    """The settings both APIs share (max_tokens, n and logprobs are each API's own)."""
    stream = flag(body, "stream")
    sampling = Sampling(temperature=float(number(body, "temperature", 1.0, 0.0, 2.0)),
                        top_p=float(number(body, "top_p", 1.0, 0.0, 1.0)),
                        top_k=number(body, "top_k", 0, -1, vocab_size, integer=True),
                        seed=number(body, "seed", None, *SEED_RANGE, integer=True),
                        stop=stops(body.get("stop")),
                        presence_penalty=float(number(body, "presence_penalty", 0.0, -2.0, 2.0)),
                        frequency_penalty=float(number(body, "frequency_penalty", 0.0, -2.0, 2.0)),
                        logit_bias=logit_bias(body.get("logit_bias"), vocab_size),
                        n=number(body, "n", 1, 1, MAX_N, integer=True),
                        stream=stream, include_usage=stream_options(body, stream),
                        ignore_eos=flag(body, "ignore_eos"), user=text(body, "user"))
    text(body, "model")
    if sampling.top_p == 0:
        raise BadRequest("top_p", "must be greater than 0")
    sampling.top_k = max(sampling.top_k, 0)  # -1 (vLLM's "off") is 0 here
    return sampling


def derived_seed(seed: int | None, choice: int) -> int | None:
    """Choice i of a seeded request samples with seed + i (wrapped into 64 bits): n=2 with seed s
    gives what two requests with seeds s and s + 1 give."""
    if seed is None:
        return None
    return (seed + choice - SEED_RANGE[0]) % 2**64 + SEED_RANGE[0]


def check_room(where: str, prompt_tokens: int, max_tokens: int, context: int, max_name: str = "max_tokens") -> None:
    """A prompt that leaves no room in the context, or max_tokens past it: 400 naming the context
    length and how to fit. Scoring only (max_tokens=0 with echo) may fill the whole context."""
    longest = context if max_tokens == 0 else context - 1
    if prompt_tokens > longest:
        room = "" if max_tokens == 0 else " and a prompt must leave room for at least 1 new token"
        raise BadRequest(where, f"{prompt_tokens} tokens, but this model's context length is {context} tokens{room}: "
                                f"shorten it to at most {longest} tokens (keep its last ones, or drop earlier "
                                f"messages); lm-evaluation-harness cuts prompts to fit when given "
                                f"max_length={context} in --model_args", code="context_length_exceeded")
    if prompt_tokens + max_tokens > context:
        raise BadRequest(max_name, f"{prompt_tokens} prompt tokens + {max_name} {max_tokens} exceed this "
                                       f"model's context length of {context} tokens: ask for at most "
                                       f"{context - prompt_tokens}, or shorten the prompt",
                         code="context_length_exceeded")
