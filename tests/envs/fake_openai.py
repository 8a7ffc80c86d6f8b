"""A tiny OpenAI-compatible chat server on 127.0.0.1 (stdlib only) for the launcher tests.

POST /v1/chat/completions answers in the real wire format (chat.completion object with choices and usage);
GET /v1/models lists one model. Every request is recorded: path, the Authorization header, the JSON body.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER = "<answer>12.5, 7.25</answer>"


class _Handler(BaseHTTPRequestHandler):
    server: FakeOpenAIServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.record("GET", self.path, self.headers.get("Authorization"), None)
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "fake-vlm", "object": "model", "created": 0,
                                                          "owned_by": "tests"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
            return
        self.server.record("POST", self.path, self.headers.get("Authorization"), body)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        self._send(200, {
            "id": f"chatcmpl-{self.server.count}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake-vlm"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 9, "total_tokens": 109},
        })


class FakeOpenAIServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def count(self) -> int:
        return len(self.requests)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def record(self, method: str, path: str, auth: str | None, body: Any) -> None:
        with self._lock:
            self.requests.append({"method": method, "path": path, "auth": auth, "body": body})

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
