"""POST /v1/completions and /v1/chat/completions: parse, submit one engine request per sequence
(n per prompt, or best_of of which the n best are kept), then answer whole or stream server-sent events.

The two APIs differ only in how a request becomes prompts and how a choice is written out (`Api`);
the driving, streaming, usage and metrics are shared.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Callable

from aiohttp import web

from trident.serve.chat import chat_choice, chat_chunk, parse_chat
from trident.serve.errors import METRICS, error_response
from trident.serve.fields import BadRequest, Sampling, derived_seed
from trident.serve.jobs import Job
from trident.serve.protocol import completion_choice, completion_chunk, completion_id, envelope, parse_completion

log = logging.getLogger("trident.serve")
STATE = web.AppKey("state", dict)


@dataclass
class Api:
    kind: str  # the response object's "object"
    chunk_kind: str
    prefix: str  # of the response id
    choice: Callable  # (job, index) -> choice dict
    chunk: Callable  # (job, piece, index) -> streamed choice dict


COMPLETIONS = Api("text_completion", "text_completion", "cmpl", completion_choice, completion_chunk)
CHAT = Api("chat.completion", "chat.completion.chunk", "chatcmpl", chat_choice, chat_chunk)


def bad_request(error: BadRequest) -> web.Response:
    return error_response(400, str(error), error.field, error.code)


async def read_json(request: web.Request):
    try:
        return json.loads(await request.text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BadRequest("body", f"is not valid JSON: {err}") from None


async def completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    try:
        completion = parse_completion(await read_json(request), state["tokenizer"], state["context"])
    except BadRequest as err:
        return bad_request(err)
    prompts = list(zip(completion.prompts, completion.prompt_texts))
    return await answer(request, prompts, completion.sampling, COMPLETIONS)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    try:
        chat = parse_chat(await read_json(request), state["tokenizer"], state["context"], state["template"])
    except BadRequest as err:
        return bad_request(err)
    return await answer(request, [(chat.prompt, chat.prompt_text)], chat.sampling, CHAT)


async def answer(request: web.Request, prompts: list, sampling: Sampling, api: Api) -> web.StreamResponse:
    state = request.app[STATE]
    loop = asyncio.get_running_loop()
    groups = [[Job(loop, state["tokenizer"], ids, text, sampling, derived_seed(sampling.seed, k), state["stop_ids"])
               for k in range(sampling.best_of)] for ids, text in prompts]
    jobs = [job for group in groups for job in group]
    if sampling.user is not None:
        log.info("%s for user %r: %d prompt(s) x %d sequence(s)", request.path, sampling.user, len(prompts),
                 sampling.best_of)
    try:
        for job in jobs:
            state["engine"].submit(job.request)
    except RuntimeError as err:
        for job in jobs:
            job.cancel()
        return error_response(503, str(err), code="unavailable")
    request.app[METRICS].tokens(sum(len(ids) for ids, _ in prompts), 0)
    try:
        if sampling.stream:
            return await _stream(request, groups, sampling, api)
        await asyncio.gather(*(job.finished.wait() for job in jobs))
    finally:
        _account(request.app[METRICS], jobs)
    if any(job.finish_reason == "error" for job in jobs):
        return error_response(500, "the engine failed while generating; see the server log", code="engine_error")
    choices = []
    for p, group in enumerate(groups):
        best = group if sampling.best_of == sampling.n else sorted(group, key=lambda j: -j.cumulative_logprob())
        choices += [api.choice(job, p * sampling.n + i) for i, job in enumerate(best[: sampling.n])]
    usage = _usage(prompts, jobs)
    return web.json_response(envelope(completion_id(api.prefix), state["name"], choices, usage, api.kind))


def _usage(prompts: list, jobs: list[Job]) -> dict:
    """Prompt tokens once per prompt; completion tokens of every sequence generated (best_of's too)."""
    prompt_tokens = sum(len(ids) for ids, _ in prompts)
    generated = sum(job.kept_tokens() for job in jobs)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": generated, "total_tokens": prompt_tokens + generated}


def _account(metrics, jobs: list[Job]) -> None:
    """Cancel what is still running (a handler cancelled mid-way frees its slots), then count."""
    for job in jobs:
        job.cancel()  # no-op once finished
    metrics.tokens(0, sum(len(job.request.new_ids) for job in jobs))
    firsts = [job.first_token_at for job in jobs if job.first_token_at is not None]
    if firsts:
        metrics.first_token(min(firsts) - min(job.created for job in jobs))


async def _stream(request: web.Request, groups: list[list[Job]], sampling: Sampling, api: Api) -> web.StreamResponse:
    """Server-sent events: one `data: {chunk}` per change, then the usage (stream_options.include_usage),
    then `data: [DONE]`. A client that goes away cancels its requests (their slots free at the next step)."""
    state = request.app[STATE]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    ident, name = completion_id(api.prefix), state["name"]
    pending = [(p * sampling.n + k, job) for p, group in enumerate(groups) for k, job in enumerate(group)]
    try:
        await response.prepare(request)
        while pending:
            waits = [asyncio.ensure_future(job.changed.wait()) for _, job in pending]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
            for index, job in list(pending):
                job.changed.clear()
                piece = job.take()
                if piece is None:
                    continue
                chunk = envelope(ident, name, [api.chunk(job, piece, index)], kind=api.chunk_kind)
                if sampling.include_usage:
                    chunk["usage"] = None
                await response.write(_event(chunk))
                if piece.final:
                    pending.remove((index, job))
        if sampling.include_usage:
            jobs = [job for group in groups for job in group]
            usage = _usage([(job.request.prompt_ids, None) for job in jobs[:: sampling.best_of]], jobs)
            await response.write(_event(envelope(ident, name, [], usage, api.chunk_kind)))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
    except ConnectionResetError:
        log.info("client went away mid-stream; its %d sequence(s) are cancelled", len(pending))
    return response


def _event(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()
