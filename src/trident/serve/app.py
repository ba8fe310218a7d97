"""The HTTP server: the OpenAI completions API on aiohttp, in front of the engine thread.

Why aiohttp: one well-kept package (the one fsspec's HTTP filesystem, s3fs and the harness already
install) gives the server, streamed responses (server-sent events are a StreamResponse) and a
graceful shutdown that stops listening and waits for in-flight handlers; an ASGI stack would add two
packages (starlette + uvicorn) and a second event-loop owner for the same.

Routes: POST /v1/completions, GET /v1/models, GET /health, and the tokenizer routes lm-evaluation-
harness's `local-completions` looks for (GET /tokenizer_info, POST /tokenize, POST /detokenize) so
it tokenizes exactly as the server does.
"""
from __future__ import annotations

import asyncio
import json
import logging
import signal
import time

from aiohttp import web

from trident.serve.jobs import Job
from trident.serve.protocol import BadRequest, completion_id, envelope, parse_completion

log = logging.getLogger("trident.serve")
STATE = web.AppKey("state", dict)


def error(status: int, message: str, field: str | None = None) -> web.Response:
    kind = "invalid_request_error" if status == 400 else "server_error"
    return web.json_response({"error": {"message": message, "type": kind, "param": field, "code": None}},
                             status=status)


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
        return error(400, str(err), err.field)
    loop = asyncio.get_running_loop()
    jobs = [Job(loop, state["tokenizer"], i, ids, text, completion)
            for i, (ids, text) in enumerate(zip(completion.prompts, completion.prompt_texts))]
    try:
        for job in jobs:
            state["engine"].submit(job.request)
    except RuntimeError as err:
        for job in jobs:
            job.cancel()
        return error(503, str(err))
    if completion.stream:
        return await _stream(request, state, jobs)
    try:
        await asyncio.gather(*(job.finished.wait() for job in jobs))
    finally:
        for job in jobs:
            job.cancel()  # no-op once finished; frees the slots if this handler is cancelled
    if any(job.finish_reason == "error" for job in jobs):
        return error(500, "the engine failed while generating; see the server log")
    prompt_tokens = sum(len(j.request.prompt_ids) for j in jobs)
    generated = sum(j.kept_tokens() for j in jobs)
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": generated, "total_tokens": prompt_tokens + generated}
    return web.json_response(envelope(completion_id(), state["name"], [j.choice() for j in jobs], usage))


async def _stream(request: web.Request, state: dict, jobs: list[Job]) -> web.StreamResponse:
    """Server-sent events: one `data: {chunk}` per change, then `data: [DONE]`. A client that goes
    away cancels its requests, which frees their slots at the engine's next step."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    ident = completion_id()
    try:
        await response.prepare(request)
        pending = list(jobs)
        while pending:
            waits = [asyncio.ensure_future(j.changed.wait()) for j in pending]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
            for job in list(pending):
                job.changed.clear()
                chunk = job.next_chunk()
                if chunk is not None:
                    await response.write(_event(envelope(ident, state["name"], [chunk])))
                if job.done and job.sent_tokens >= job.kept_tokens():
                    pending.remove(job)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        log.info("client went away mid-stream; its %d request(s) are cancelled", len(jobs))
        raise
    finally:
        for job in jobs:
            job.cancel()
    return response


def _event(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


async def models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.json_response({"object": "list", "data": [{
        "id": state["name"], "object": "model", "created": state["created"], "owned_by": "trident",
        "max_model_len": state["context"]}]})


async def health(request: web.Request) -> web.Response:
    engine = request.app[STATE]["engine"]
    if engine.error is not None:
        return web.json_response({"status": "error", "error": str(engine.error)}, status=503)
    return web.json_response({"status": "ok", **engine.load})


async def tokenizer_info(request: web.Request) -> web.Response:
    return web.json_response({"eos_token": "<|endoftext|>", "bos_token": None, "pad_token": None,
                              "model_max_length": request.app[STATE]["context"]})


async def tokenize(request: web.Request) -> web.Response:
    tokenizer = request.app[STATE]["tokenizer"]
    try:
        body = await read_json(request)
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            raise BadRequest("prompt", "must be a string")
    except BadRequest as err:
        return error(400, str(err), err.field)
    text = body["prompt"]
    if text == "<|endoftext|>":
        return web.json_response({"tokens": [tokenizer.eod_id]})
    return web.json_response({"tokens": tokenizer.encode(text)})


async def detokenize(request: web.Request) -> web.Response:
    tokenizer = request.app[STATE]["tokenizer"]
    try:
        body = await read_json(request)
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) and 0 <= t < tokenizer.vocab_size
                                                   for t in tokens):
            raise BadRequest("tokens", f"must be a list of token ids in [0, {tokenizer.vocab_size})")
    except BadRequest as err:
        return error(400, str(err), err.field)
    return web.json_response({"prompt": tokenizer.decode(tokens)})


def build_app(engine_loop, tokenizer, name: str, context: int) -> web.Application:
    app = web.Application(client_max_size=16 * 2**20)
    app[STATE] = {"engine": engine_loop, "tokenizer": tokenizer, "name": name, "context": context,
                  "created": int(time.time())}
    app.add_routes([web.post("/v1/completions", completions), web.get("/v1/models", models),
                    web.get("/health", health), web.get("/tokenizer_info", tokenizer_info),
                    web.post("/tokenize", tokenize), web.post("/detokenize", detokenize)])
    return app


async def run_app(app: web.Application, host: str, port: int, shutdown_timeout: float, on_ready=None) -> None:
    """Serve until SIGTERM or SIGINT; then stop listening and let in-flight requests finish."""
    runner = web.AppRunner(app, shutdown_timeout=shutdown_timeout, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if on_ready is not None:
        on_ready()
    await stop.wait()
    log.info("stopping: no new connections; finishing the requests in flight")
    await runner.cleanup()
