"""Every non-2xx answer is the OpenAI error object, `{"error": {"message", "type", "param", "code"}}`,
as application/json: unknown path 404, wrong method 405 (with Allow), bad field 400 naming it, a
body too large 413, engine gone 503, and any fault of the server 500, whose traceback goes to the
server's log and never to the client. The same middleware counts every answer for /metrics."""
from __future__ import annotations

import logging
import uuid

from aiohttp import web

from trident.serve.metrics import Metrics

log = logging.getLogger("trident.serve")
METRICS = web.AppKey("metrics", Metrics)
MAX_BODY_BYTES = 16 * 2**20  # a request's body at most: far over any prompt a context holds


def error_response(status: int, message: str, param: str | None = None, code: str | None = None,
                   headers: dict | None = None, extra: dict | None = None) -> web.Response:
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}, **(extra or {})}
    return web.json_response(body, status=status, headers=headers)


def _route(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "other"


def _from_http_error(request: web.Request, error: web.HTTPException) -> web.Response:
    if error.status == 404:
        return error_response(404, f"no route {request.method} {request.path}; this server answers "
                                   f"/v1/completions, /v1/chat/completions, /v1/models, /health and /metrics",
                              code="not_found")
    if error.status == 405:
        allowed = sorted(getattr(error, "allowed_methods", ()))
        return error_response(405, f"{request.path} does not take {request.method}; use {', '.join(allowed)}",
                              code="method_not_allowed", headers={"Allow": ",".join(allowed)})
    if error.status == 413:
        return error_response(413, f"the request body is over this server's limit of {MAX_BODY_BYTES} bytes "
                                   f"({MAX_BODY_BYTES >> 20} MiB); send shorter prompts or fewer at once",
                              code="request_too_large")
    return error_response(error.status, error.reason or error.text or "request refused")


@web.middleware
async def errors_as_json(request: web.Request, handler):
    metrics = request.app[METRICS]
    try:
        response = await handler(request)
    except web.HTTPException as error:
        if error.status < 400:
            raise  # redirects and the like are not errors
        response = _from_http_error(request, error)
    except Exception:  # a fault of ours: the client gets an id to quote, the log gets the traceback
        incident = uuid.uuid4().hex[:12]
        log.exception("internal error %s answering %s %s", incident, request.method, request.path)
        response = error_response(500, f"internal server error (incident {incident}; see the server log)",
                                  code="internal_error")
    metrics.answered(_route(request), response.status)
    return response
