"""A fake model provider: a real HTTP server on 127.0.0.1 speaking OpenAI chat completions, Anthropic messages and
Gemini generateContent, with scripted faults.

In tests, :class:`FakeProviderServer` runs in a background thread; ``push()`` queues what the next requests get
(a fault or a normal answer), ``received`` records every request (path, headers, JSON body). As a script
(``python tests/fakes/provider_server.py --port 0 --port-file F --latency 0.05``) it serves normal OpenAI answers
after a fixed latency without parsing request bodies: the separate-process server of the throughput benchmark
and of the serve-mode tests.

Faults (``Fault.kind``): ``status`` (an HTTP error in the provider's error format, with optional headers such as
Retry-After), ``hang`` (no answer for ``delay`` seconds), ``reset`` (the connection is dropped with no response),
``malformed`` (200 with a body that is not JSON), ``empty`` (200 with an empty answer), ``length`` (200, answer
cut at max tokens), ``answer`` (a normal answer, optionally with ``text``/``delay``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

DEFAULT_ANSWER = "<answer>12.5, 7.25</answer>"


@dataclass
class Fault:
    kind: str = "answer"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "scripted failure"
    delay: float = 0.0
    text: str | None = None
    echo_auth: bool = False  # put the received credentials into the error message, as some providers do
    reasoning: str | None = None  # OpenAI flavour: message.reasoning_content (vLLM, DeepSeek, Kimi)


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float


def _openai_answer(model: str, text: str, finish: str) -> dict[str, Any]:
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18,
                      "completion_tokens_details": {"reasoning_tokens": 3}}}


def _anthropic_answer(model: str, text: str, finish: str) -> dict[str, Any]:
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "thinking", "thinking": "looking at the image", "signature": "sig"},
                        {"type": "text", "text": text}],
            "stop_reason": {"stop": "end_turn", "length": "max_tokens"}[finish], "stop_sequence": None,
            "usage": {"input_tokens": 11, "output_tokens": 7}}


def _gemini_answer(model: str, text: str, finish: str) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                            "finishReason": {"stop": "STOP", "length": "MAX_TOKENS"}[finish], "index": 0}],
            "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 7, "thoughtsTokenCount": 3,
                              "totalTokenCount": 21},
            "modelVersion": model}


def _error_body(flavor: str, status: int, message: str) -> dict[str, Any]:
    if flavor == "anthropic":
        kind = {429: "rate_limit_error", 529: "overloaded_error", 400: "invalid_request_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    if flavor == "gemini":
        return {"error": {"code": status, "message": message, "status": "RESOURCE_EXHAUSTED" if status == 429
                          else "INTERNAL"}}
    return {"error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error",
                      "code": None}}


class _App:
    """The request handlers, shared by the in-thread server and the script."""

    def __init__(self, *, record: bool = True, latency: float = 0.0, answer: str = DEFAULT_ANSWER,
                 log_requests: bool = False) -> None:
        self.script: deque[Fault] = deque()
        self.received: list[Received] = []
        self.record = record
        self.latency = latency
        self.answer = answer
        self.log_requests = log_requests
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self._canned = json.dumps(_openai_answer("fake", answer, "stop")).encode()
        #: the answer text for a request body, when set (else ``answer``): the same for a live request and a batch
        #: line carrying the same body
        self.answer_fn: Any = None
        #: what else the server speaks (``routes(router)`` adds them before the catch-all): the batch interfaces
        self.extra_routes: list[Any] = []

    def next_fault(self) -> Fault:
        with self.lock:
            return self.script.popleft() if self.script else Fault()

    async def handle(self, request: web.Request, flavor: str) -> web.StreamResponse:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._handle(request, flavor)
        finally:
            self.in_flight -= 1

    async def _handle(self, request: web.Request, flavor: str) -> web.StreamResponse:
        raw = await request.read()
        if not self.record:  # benchmark mode: fixed latency, canned answer, no parsing
            if self.log_requests:
                print(f"answered {request.method} {request.path}", flush=True)
            await asyncio.sleep(self.latency)
            return web.Response(body=self._canned, content_type="application/json")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", errors="replace")
        with self.lock:
            self.received.append(Received(request.method, request.path, dict(request.headers), body, time.time()))
        fault = self.next_fault()
        model = (body or {}).get("model", "gemini") if isinstance(body, dict) else "m"
        await asyncio.sleep(self.latency + (fault.delay if fault.kind != "hang" else 0))
        if fault.kind == "hang":
            await asyncio.sleep(fault.delay or 3600)
            return web.Response(status=504, text="hung")
        if fault.kind == "reset":
            sock = request.transport.get_extra_info("socket") if request.transport else None
            if sock is not None:  # RST instead of FIN: the client sees "connection reset by peer"
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            request.transport.close()
            raise web.HTTPInternalServerError()  # never reaches the client: the connection is gone
        if fault.kind == "status":
            message = fault.message
            if fault.echo_auth:
                creds = [request.headers.get(h, "") for h in ("Authorization", "x-api-key", "x-goog-api-key")]
                message += f" (credentials received: {' '.join(c for c in creds if c)})"
            return web.json_response(_error_body(flavor, fault.status, message), status=fault.status,
                                     headers=fault.headers)
        if fault.kind == "malformed":
            return web.Response(status=200, text='{"choices": [ oops', content_type="application/json")
        text = "" if fault.kind == "empty" else (fault.text if fault.text is not None else self.answer_for(body))
        finish = "length" if fault.kind == "length" else "stop"
        maker = {"openai": _openai_answer, "anthropic": _anthropic_answer, "gemini": _gemini_answer}[flavor]
        reply = maker(str(model), text, finish)
        if fault.reasoning is not None and flavor == "openai":
            reply["choices"][0]["message"]["reasoning_content"] = fault.reasoning
        return web.json_response(reply)

    def answer_for(self, body: Any) -> str:
        return str(self.answer_fn(body)) if self.answer_fn is not None else self.answer

    def build(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        for routes in self.extra_routes:
            routes(app.router)

        async def openai(request: web.Request) -> web.StreamResponse:
            return await self.handle(request, "openai")

        async def anthropic(request: web.Request) -> web.StreamResponse:
            return await self.handle(request, "anthropic")

        async def gemini(request: web.Request) -> web.StreamResponse:
            return await self.handle(request, "gemini")

        async def health(request: web.Request) -> web.Response:
            return web.json_response({"status": "ok"})

        async def models(request: web.Request) -> web.Response:
            return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

        app.router.add_post("/v1/chat/completions", openai)
        app.router.add_post("/{gateway:.+}/v1/chat/completions", openai)  # a gateway's prefix (keys in paths)
        app.router.add_post("/v1/messages", anthropic)
        app.router.add_post("/v1beta/models/{model}", gemini)
        app.router.add_post("/v1/models/{model}", gemini)
        app.router.add_get("/health", health)
        app.router.add_get("/v1/models", models)
        app.router.add_route("*", "/{tail:.*}", self.unknown)
        return app

    async def unknown(self, request: web.Request) -> web.Response:
        """Record requests to paths no provider uses, so tests can see what a client got wrong."""
        raw = await request.read()
        with self.lock:
            self.received.append(Received(request.method, request.path, dict(request.headers),
                                          raw.decode("utf-8", errors="replace"), time.time()))
        return web.json_response({"error": {"message": f"no route {request.method} {request.path}"}}, status=404)


class JudgeApp(_App):
    """A judge model over the OpenAI chat wire: records each request, finds the response to judge and the expected
    answer count in the user message the judge prompt builds, and answers with what ``verdict`` returns."""

    async def verdict(self, body: dict[str, Any], response: str, k: int) -> str:
        raise NotImplementedError

    async def _handle(self, request: web.Request, flavor: str) -> web.StreamResponse:
        body = json.loads(await request.read())
        with self.lock:
            self.received.append(Received(request.method, request.path, dict(request.headers), body, time.time()))
        user = body["messages"][-1]["content"]
        user = user if isinstance(user, str) else "".join(p.get("text", "") for p in user)
        response = user.split("RESPONSE:\n<<<\n", 1)[1].rsplit("\n>>>", 1)[0]
        k = int(re.search(r"EXPECTED_ANSWER_COUNT: (\d+)", user).group(1))  # type: ignore[union-attr]
        return web.json_response(_openai_answer(body["model"], await self.verdict(body, response, k), "stop"))


class FakeProviderServer:
    """The fake provider on a background thread; use as a context manager or call start()/stop()."""

    def __init__(self, *, latency: float = 0.0, answer: str = DEFAULT_ANSWER) -> None:
        self.app = _App(latency=latency, answer=answer)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def received(self) -> list[Received]:
        return self.app.received

    def push(self, *faults: Fault) -> None:
        with self.app.lock:
            self.app.script.extend(faults)

    def start(self) -> FakeProviderServer:
        ready = threading.Event()
        loop = asyncio.new_event_loop()

        async def boot() -> None:
            self._runner = web.AppRunner(self.app.build(), access_log=None, shutdown_timeout=0.1)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(boot())
            loop.run_forever()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="fake-provider", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake provider did not start")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        loop, runner = self._loop, self._runner

        async def down() -> None:
            if runner is not None:
                await runner.cleanup()
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:  # handlers still sleeping in a "hang" fault
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(down(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None

    def __enter__(self) -> FakeProviderServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _LeanHttp(asyncio.Protocol):
    """A bare HTTP/1.1 keep-alive responder for the throughput benchmark: every POST gets the canned answer after
    the fixed latency, every GET a health reply. It spends far less CPU per request than aiohttp.web, so on a
    small machine the client under test keeps the cores (the server stands in for a remote one)."""

    def __init__(self, latency: float, answer: bytes) -> None:
        self.latency = latency
        self.answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                       + str(len(answer)).encode() + b"\r\n\r\n" + answer)
        health = b'{"object": "list", "data": [{"id": "fake-model", "object": "model"}]}'
        self.health = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                       + str(len(health)).encode() + b"\r\n\r\n" + health)
        self.buf = bytearray()
        self.need: int | None = None  # bytes of the current request (head + body) once its head is read
        self.is_get = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            if self.need is None:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
                length = 0
                for line in head[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                self.need = end + 4 + length
                self.is_get = head[0].startswith("GET ")
            if len(self.buf) < self.need:
                return
            del self.buf[: self.need]
            self.need = None
            if self.is_get:
                self.transport.write(self.health)  # type: ignore[attr-defined]
            else:
                self.loop.call_later(self.latency, self._reply)

    def _reply(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(self.answer)  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", default=None, help="write the bound port here once listening")
    p.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    p.add_argument("--startup-delay", type=float, default=0.0, help="seconds before listening")
    p.add_argument("--ignore-sigterm", action="store_true", help="only SIGKILL stops it")
    p.add_argument("--exit-after", type=float, default=None, help="exit with status 3 after this many seconds")
    p.add_argument("--log-requests", action="store_true", help="print one line per answered request")
    p.add_argument("--lean", action="store_true", help="bare HTTP/1.1 responder (throughput benchmark)")
    args = p.parse_args(argv)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"fake provider pid {os.getpid()} starting; "
          f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}", flush=True)
    time.sleep(args.startup_delay)
    if args.exit_after is not None and args.exit_after <= args.startup_delay:
        print("fake provider: failing on purpose", flush=True)
        return 3
    app = _App(record=False, latency=args.latency, log_requests=args.log_requests).build()

    async def serve_lean() -> None:
        answer = json.dumps(_openai_answer("fake", DEFAULT_ANSWER, "stop")).encode()
        server = await asyncio.get_running_loop().create_server(lambda: _LeanHttp(args.latency, answer),
                                                                args.host, args.port)
        port = server.sockets[0].getsockname()[1]
        if args.port_file:
            Path(args.port_file).write_text(str(port))
        print(f"fake provider (lean) listening on {args.host}:{port}", flush=True)
        await server.serve_forever()

    if args.lean:
        asyncio.run(serve_lean())
        return 0

    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, args.host, args.port)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        if args.port_file:
            Path(args.port_file).write_text(str(port))
        print(f"fake provider listening on {args.host}:{port}", flush=True)
        if args.exit_after is not None:
            await asyncio.sleep(args.exit_after - args.startup_delay)
            print("fake provider: exiting on purpose", flush=True)
            os._exit(3)
        await asyncio.Event().wait()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
