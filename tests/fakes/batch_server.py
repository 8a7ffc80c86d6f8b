"""Providers' batch wire formats on the fake provider. OpenAI's Files and Batches: ``POST /v1/files`` (multipart
upload), ``POST /v1/batches``, ``GET /v1/batches/{id}``, ``GET /v1/files/{id}/content``,
``POST /v1/batches/{id}/cancel``. Anthropic's Message Batches: ``POST /v1/messages/batches``,
``GET /v1/messages/batches/{id}``, ``GET /v1/messages/batches/{id}/results`` (JSONL), ``.../cancel``. Gemini's
batch mode with inline requests: ``POST /v1beta/models/{model}:batchGenerateContent``, ``GET /v1beta/batches/{id}``
(the inline responses once it ended), ``POST /v1beta/batches/{id}:cancel``.

A batch stays ``in_progress`` while ``hold`` is set; at the first look after that it ends: each line of its input
file is answered as the live route answers the same body (``_App.answer_for``), unless ``outcome(custom_id, body)``
says ``expired`` (an error-file line ``batch_expired``, the batch ends ``expired``) or ``failed`` (a 500 response
in the error file). Every batch created is counted; every request's headers are kept in ``received``;
``faults`` holds HTTP statuses the next requests to these routes get instead (a 503 to retry, a 400 for good).
"""

from __future__ import annotations

import collections
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from fakes.provider_server import (
    FakeProviderServer,
    Received,
    _anthropic_answer,
    _error_body,
    _gemini_answer,
    _openai_answer,
)


@dataclass
class FakeBatch:
    id: str
    input_file_id: str
    endpoint: str
    created_at: int
    status: str = "in_progress"
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(default_factory=lambda: {"total": 0, "completed": 0, "failed": 0})
    #: Anthropic flavour: the requests as (custom_id, params), and each one's fate and answer once it ended
    requests: list[tuple[str, Any]] = field(default_factory=list)
    results: list[tuple[str, str, str | None]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # Gemini flavour: per id, its request and metadata

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "object": "batch", "endpoint": self.endpoint, "errors": None,
                "input_file_id": self.input_file_id, "completion_window": "24h", "status": self.status,
                "output_file_id": self.output_file_id, "error_file_id": self.error_file_id,
                "created_at": self.created_at, "in_progress_at": self.created_at, "expires_at": self.created_at + 86400,
                "request_counts": dict(self.counts), "metadata": None}


class FakeBatches:
    """The batch routes and their state, added to a FakeProviderServer's app."""

    def __init__(self, server: FakeProviderServer) -> None:
        self.app = server.app
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, FakeBatch] = {}
        self.hold = False
        self.outcome: Callable[[str, Any], str] = lambda custom_id, body: "ok"
        self.created = 0
        self.lines_answered = 0
        self.faults: collections.deque[int] = collections.deque()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        server.app.extra_routes.append(self.routes)

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v1/messages/batches", self._faulty(self.anthropic_create))
        router.add_get("/v1/messages/batches/{id}", self._faulty(self.anthropic_retrieve))
        router.add_get("/v1/messages/batches/{id}/results", self._faulty(self.anthropic_results))
        router.add_post("/v1/messages/batches/{id}/cancel", self._faulty(self.anthropic_cancel))
        router.add_post("/v1beta/models/{model:[^/:]+}:batchGenerateContent", self._faulty(self.gemini_create))
        router.add_get("/v1beta/batches/{id:[^/:]+}", self._faulty(self.gemini_get))
        router.add_post("/v1beta/batches/{id:[^/:]+}:cancel", self._faulty(self.gemini_cancel))
        router.add_post("/v1/files", self._faulty(self.upload))
        router.add_post("/v1/batches", self._faulty(self.create))
        router.add_get("/v1/batches/{id}", self._faulty(self.retrieve))
        router.add_post("/v1/batches/{id}/cancel", self._faulty(self.cancel))
        router.add_get("/v1/files/{id}/content", self._faulty(self.content))

    def _faulty(self, handler: Callable[[web.Request], Any]) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.StreamResponse:
            with self._lock:
                status = self.faults.popleft() if self.faults else None
            if status is not None:
                self._note(request, {"fault": status})
                seen = request.headers.get("Authorization", "") or request.headers.get("x-api-key", "")
                message = f"scripted failure (key seen: {seen})"
                flavor = ("anthropic" if request.path.startswith("/v1/messages") else
                          "gemini" if request.path.startswith("/v1beta") else "openai")
                return web.json_response(_error_body(flavor, status, message), status=status)
            return await handler(request)

        return handle

    def _note(self, request: web.Request, body: Any) -> None:
        with self.app.lock:
            self.app.received.append(Received(request.method, request.path, dict(request.headers), body, time.time()))

    async def upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form["file"]
        data = upload.file.read()  # type: ignore[union-attr]
        self._note(request, {"purpose": form.get("purpose"), "bytes": len(data)})
        file_id = f"file-{next(self._ids)}"
        self.files[file_id] = data
        return web.json_response({"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                                  "filename": getattr(upload, "filename", "batch.jsonl"), "purpose": form.get("purpose"),
                                  "status": "processed"})

    async def create(self, request: web.Request) -> web.Response:
        body = await request.json()
        self._note(request, body)
        if body.get("input_file_id") not in self.files:
            return web.json_response(_error_body("openai", 404, "no such file"), status=404)
        with self._lock:
            self.created += 1
            batch = FakeBatch(f"batch_{next(self._ids)}", body["input_file_id"], body["endpoint"], int(time.time()))
            self.batches[batch.id] = batch
        batch.counts["total"] = len(self.files[batch.input_file_id].splitlines())
        return web.json_response(batch.to_json())

    async def retrieve(self, request: web.Request) -> web.Response:
        self._note(request, None)
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return web.json_response(_error_body("openai", 404, "no such batch"), status=404)
        if batch.status == "in_progress" and not self.hold:
            self._finish(batch, cancelled=False)
        return web.json_response(batch.to_json())

    async def cancel(self, request: web.Request) -> web.Response:
        self._note(request, None)
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return web.json_response(_error_body("openai", 404, "no such batch"), status=404)
        if batch.status == "in_progress":
            self._finish(batch, cancelled=True)
        return web.json_response(batch.to_json())

    async def content(self, request: web.Request) -> web.Response:
        self._note(request, None)
        data = self.files.get(request.match_info["id"])
        if data is None:
            return web.json_response(_error_body("openai", 404, "no such file"), status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    def _finish(self, batch: FakeBatch, *, cancelled: bool) -> None:
        out: list[bytes] = []
        err: list[bytes] = []
        expired = False
        for raw in self.files[batch.input_file_id].splitlines():
            line = json.loads(raw)
            cid, body = line["custom_id"], line["body"]
            fate = "cancelled" if cancelled else self.outcome(cid, body)
            if fate == "ok":
                text = self.app.answer_for(body)
                self.lines_answered += 1
                result = {"id": f"req-{cid}", "custom_id": cid, "error": None, "response": {
                    "status_code": 200, "request_id": f"r-{cid}", "body": _openai_answer(body["model"], text, "stop")}}
                out.append(json.dumps(result).encode())
                continue
            expired |= fate == "expired"
            if fate == "failed":
                result = {"id": f"req-{cid}", "custom_id": cid, "error": None, "response": {
                    "status_code": 500, "request_id": f"r-{cid}", "body": _error_body("openai", 500, "server error")}}
            else:
                code = {"expired": "batch_expired", "cancelled": "batch_cancelled"}[fate]
                result = {"id": f"req-{cid}", "custom_id": cid, "response": None,
                          "error": {"code": code, "message": f"This request could not be executed ({fate})."}}
            err.append(json.dumps(result).encode())
        for lines, attr in ((out, "output_file_id"), (err, "error_file_id")):
            if lines:
                file_id = f"file-{next(self._ids)}"
                self.files[file_id] = b"\n".join(lines) + b"\n"
                setattr(batch, attr, file_id)
        batch.counts.update(completed=len(out), failed=len(err))
        batch.status = "cancelled" if cancelled else "expired" if expired else "completed"

    # ------------------------------------------------------------------ Anthropic Message Batches
    def _fates(self, requests: list[tuple[str, Any]], cancelled: bool) -> list[tuple[str, str, str | None]]:
        out: list[tuple[str, str, str | None]] = []
        for cid, body in requests:
            fate = "canceled" if cancelled else self.outcome(cid, body)
            text = self.app.answer_for(body) if fate == "ok" else None
            self.lines_answered += fate == "ok"
            out.append((cid, fate, text))
        return out

    def _anthropic_json(self, batch: FakeBatch, base: str) -> dict[str, Any]:
        ended = batch.status != "in_progress"
        counts = {"processing": 0 if ended else len(batch.requests), "succeeded": 0, "errored": 0, "canceled": 0,
                  "expired": 0}
        for _, fate, _ in batch.results:
            counts[{"ok": "succeeded", "failed": "errored"}.get(fate, fate)] += 1
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(batch.created_at))
        return {"id": batch.id, "type": "message_batch", "processing_status": "ended" if ended else "in_progress",
                "request_counts": counts, "created_at": stamp, "expires_at": stamp, "ended_at": stamp if ended else None,
                "archived_at": None, "cancel_initiated_at": None,
                "results_url": f"{base}/v1/messages/batches/{batch.id}/results" if ended else None}

    async def anthropic_create(self, request: web.Request) -> web.Response:
        body = await request.json()
        self._note(request, body)
        with self._lock:
            self.created += 1
            batch = FakeBatch(f"msgbatch_{next(self._ids)}", "", "/v1/messages", int(time.time()))
            self.batches[batch.id] = batch
        batch.requests = [(r["custom_id"], r["params"]) for r in body["requests"]]
        return web.json_response(self._anthropic_json(batch, _base(request)))

    async def anthropic_retrieve(self, request: web.Request) -> web.Response:
        self._note(request, None)
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return web.json_response(_error_body("anthropic", 404, "no such batch"), status=404)
        if batch.status == "in_progress" and not self.hold:
            batch.results, batch.status = self._fates(batch.requests, cancelled=False), "ended"
        return web.json_response(self._anthropic_json(batch, _base(request)))

    async def anthropic_cancel(self, request: web.Request) -> web.Response:
        self._note(request, None)
        batch = self.batches[request.match_info["id"]]
        if batch.status == "in_progress":
            batch.results, batch.status = self._fates(batch.requests, cancelled=True), "ended"
        return web.json_response(self._anthropic_json(batch, _base(request)))

    async def anthropic_results(self, request: web.Request) -> web.Response:
        self._note(request, None)
        batch = self.batches[request.match_info["id"]]
        models = dict(batch.requests)
        lines = []
        for cid, fate, text in batch.results:
            if fate == "ok":
                result: dict[str, Any] = {"type": "succeeded",
                                          "message": _anthropic_answer(models[cid]["model"], text or "", "stop")}
            elif fate == "failed":
                result = {"type": "errored", "error": _error_body("anthropic", 500, "server error")}
            else:
                result = {"type": fate}
            lines.append(json.dumps({"custom_id": cid, "result": result}))
        return web.Response(body="\n".join(lines).encode() + b"\n", content_type="application/binary")

    # ------------------------------------------------------------------ Gemini batch mode (inline requests)
    def _gemini_json(self, batch: FakeBatch) -> dict[str, Any]:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(batch.created_at))
        state = {"in_progress": "BATCH_STATE_RUNNING", "ended": "BATCH_STATE_SUCCEEDED",
                 "expired": "BATCH_STATE_EXPIRED", "cancelled": "BATCH_STATE_CANCELLED"}[batch.status]
        meta: dict[str, Any] = {"@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.GenerateContentBatch",
                                "model": batch.endpoint, "createTime": stamp, "updateTime": stamp, "state": state}
        if batch.status != "in_progress":
            metas = {cid: md for cid, (_, md) in batch.extra.items()}
            responses = []
            for cid, fate, text in batch.results:
                if fate == "ok":
                    responses.append({"response": _gemini_answer(batch.endpoint, text or "", "stop"),
                                      "metadata": metas[cid]})
                else:
                    responses.append({"error": {"code": 500 if fate == "failed" else 499,
                                                "message": f"request {fate}"}, "metadata": metas[cid]})
            meta["output"] = {"inlinedResponses": {"inlinedResponses": responses}}
            meta["endTime"] = stamp
        return {"name": f"batches/{batch.id}", "metadata": meta, "done": batch.status != "in_progress"}

    async def gemini_create(self, request: web.Request) -> web.Response:
        body = await request.json()
        self._note(request, body)
        with self._lock:
            self.created += 1
            batch = FakeBatch(f"gb{next(self._ids)}", "", f"models/{request.match_info['model']}", int(time.time()))
            self.batches[batch.id] = batch
        inline = body["batch"]["inputConfig"]["requests"]["requests"]
        batch.extra = {}
        for n, item in enumerate(inline):
            cid = str((item.get("metadata") or {}).get("medvision_id", n))
            batch.requests.append((cid, item["request"]))
            batch.extra[cid] = (item["request"], item.get("metadata"))
        return web.json_response(self._gemini_json(batch))

    async def gemini_get(self, request: web.Request) -> web.Response:
        self._note(request, None)
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return web.json_response(_error_body("gemini", 404, "no such batch"), status=404)
        if batch.status == "in_progress" and not self.hold:
            batch.results = self._fates(batch.requests, cancelled=False)
            batch.status = "expired" if any(f == "expired" for _, f, _ in batch.results) else "ended"
        return web.json_response(self._gemini_json(batch))

    async def gemini_cancel(self, request: web.Request) -> web.Response:
        self._note(request, None)
        batch = self.batches[request.match_info["id"]]
        if batch.status == "in_progress":
            batch.results, batch.status = self._fates(batch.requests, cancelled=True), "cancelled"
        return web.json_response({})


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"
