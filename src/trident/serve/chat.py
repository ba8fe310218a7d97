"""The OpenAI chat completions API as trident serves it: messages rendered by the model's chat
template (serve/chat_template.py) into one prompt, then generated as a completion is.

https://platform.openai.com/docs/api-reference/chat: `messages` (role + content: a string, or a
list of text parts, joined with newlines as vLLM does for string templates); `max_completion_tokens`
(or the older `max_tokens`; default: the room left in the context); `logprobs` true with
`top_logprobs` 0..20; `n` choices (choice i sampled with seed + i). Fields for tools, structured
output and other modalities are accepted at the value that asks for none of them.
`add_generation_prompt` (default true) and `chat_template_kwargs` are extensions, as in vLLM.
"""
from __future__ import annotations

from dataclasses import dataclass

import jinja2

from trident.infer.plan import MAX_TOP_LOGPROBS
from trident.serve import fields
from trident.serve.fields import BadRequest, Sampling

FIELDS = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed", "stop",
          "logprobs", "top_logprobs", "stream", "stream_options", "n", "user", "ignore_eos", "presence_penalty",
          "frequency_penalty", "logit_bias", "response_format", "tools", "tool_choice", "parallel_tool_calls",
          "functions", "function_call", "store", "metadata", "service_tier", "modalities", "reasoning_effort",
          "prediction", "audio", "web_search_options", "add_generation_prompt", "chat_template_kwargs"}
NO_TOOLS = "this server runs no tools or functions"
AT_DEFAULT = {  # field: (values that ask for nothing this model lacks, why others are refused)
    "response_format": ((None, {"type": "text"}), "only plain text is generated (no JSON mode or schema)"),
    "tools": ((None, []), NO_TOOLS), "functions": ((None, []), NO_TOOLS),
    "tool_choice": ((None, "none", "auto"), NO_TOOLS), "function_call": ((None, "none", "auto"), NO_TOOLS),
    "parallel_tool_calls": ((None, True, False), NO_TOOLS),
    "store": ((None, False), "nothing is stored"),
    "service_tier": ((None, "auto", "default"), "one service tier"),
    "modalities": ((None, ["text"]), "text only"),
    "reasoning_effort": ((None,), "not a reasoning model"),
    "prediction": ((None,), "no predicted outputs"), "audio": ((None,), "text only"),
    "web_search_options": ((None,), "no web search"),
}
ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


@dataclass
class Chat:
    prompt: list[int]
    prompt_text: str
    sampling: Sampling


def _content(value, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for j, part in enumerate(value):
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise BadRequest(f"{where}[{j}]", "only text parts ({\"type\": \"text\", \"text\": ...}) are served")
            parts.append(part["text"])
        return "\n".join(parts)
    raise BadRequest(where, f"must be a string or a list of text parts, got {type(value).__name__}")


def parse_messages(value) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise BadRequest("messages", "must be a non-empty list of {\"role\", \"content\"} objects")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise BadRequest(f"messages[{i}]", f"must be an object, got {type(message).__name__}")
        if message.get("role") not in ROLES:
            raise BadRequest(f"messages[{i}].role", f"must be one of {sorted(ROLES)}, got {message.get('role')!r}")
        messages.append({**message, "content": _content(message.get("content"), f"messages[{i}].content")})
    return messages


def render(body: dict, template, tokenizer) -> tuple[list[int], str]:
    """The prompt (ids, text) the template makes of the messages."""
    if template.template is None:
        raise BadRequest(None, f"this model has no chat template ({template.missing}); start the server with "
                               f"--chat-template FILE (a jinja2 file), or use /v1/completions", code="no_chat_template")
    messages = parse_messages(body.get("messages"))
    extra = body.get("chat_template_kwargs") or {}
    if not isinstance(extra, dict):
        raise BadRequest("chat_template_kwargs", "must be an object")
    try:
        text = template.render(messages, fields.flag(body, "add_generation_prompt", True), extra)
    except jinja2.TemplateError as error:  # raise_exception in the template, or a failure rendering it
        raise BadRequest("messages", f"the chat template ({template.where}) refused them: {error}") from None
    return tokenizer.encode(text) or [tokenizer.eod_id], text


def parse_chat(body, tokenizer, context: int, template) -> Chat:
    """A validated Chat from a decoded JSON body, or BadRequest naming the field."""
    fields.check_fields(body, FIELDS)
    for name, (allowed, why) in AT_DEFAULT.items():
        fields.only_default(body, name, allowed, why)
    if body.get("metadata") is not None and not isinstance(body["metadata"], dict):
        raise BadRequest("metadata", "must be an object")
    sampling = fields.parse_sampling(body, tokenizer.vocab_size)
    sampling.best_of = sampling.n
    wants_logprobs = fields.flag(body, "logprobs")
    top = fields.number(body, "top_logprobs", None, 0, MAX_TOP_LOGPROBS, integer=True)
    if top is not None and not wants_logprobs:
        raise BadRequest("top_logprobs", "needs logprobs=true")
    sampling.logprobs = (top or 0) if wants_logprobs else None
    prompt, text = render(body, template, tokenizer)
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    sampling.max_tokens = fields.number(body, name, None, 1, context, integer=True)
    fields.check_room("messages", len(prompt), sampling.max_tokens or 1, context, name)
    if sampling.max_tokens is None:
        sampling.max_tokens = context - len(prompt)  # as vLLM: whatever room the context leaves
    return Chat(prompt, text, sampling)


# ---- responses ---------------------------------------------------------------------------------------
def _logprobs(job, first: int, last: int) -> dict | None:
    """{"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]} for tokens [first, last)."""
    if job.top_n is None:
        return None
    decode = job.tokenizer.decode

    def entry(token: int, logprob: float) -> dict:
        text = decode([token])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    ids, lps, tops = job.token_entries(first, last)
    return {"content": [{**entry(t, lp), "top_logprobs": [entry(a, alp) for a, alp in top]}
                        for t, lp, top in zip(ids, lps, tops)]}


def chat_choice(job, index: int) -> dict:
    return {"index": index, "message": {"role": "assistant", "content": job.text},
            "logprobs": _logprobs(job, 0, job.kept_tokens()), "finish_reason": job.finish_reason}


def chat_chunk(job, piece, index: int) -> dict:
    """A streamed choice: the role in the first piece, then the new text; the finish reason last."""
    delta = {"role": "assistant", "content": piece.text} if piece.opening else {"content": piece.text}
    if piece.final and not piece.text and not piece.opening:
        delta = {}
    return {"index": index, "delta": delta, "logprobs": _logprobs(job, piece.first, piece.last),
            "finish_reason": job.finish_reason if piece.final else None}
