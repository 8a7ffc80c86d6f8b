"""Several base URLs of one model: requests go to the least-busy live server; one that stops answering sits out.

A server is taken out after ``max_failures`` consecutive transport failures (connection refused or reset, timeouts,
502/503/504) and comes back after a cool-down that doubles each time it is taken out again (capped); its first
request after that is a probe, and one success restores it fully. If every server is out, the one due back first
is used, so a lone server is never abandoned.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit, urlunsplit

from medvision_bm.errors import UserError
from medvision_bm.models.api.retry import AttemptError, Clock, RealClock, capped_backoff
from medvision_bm.secrets import redact, register_secret, register_url

#: Statuses that say "this server is unwell" rather than "this request was wrong" or "slow down".
SERVER_DOWN_STATUSES = frozenset({502, 503, 504})


def validate_url(url: str) -> str:
    """An http(s) URL without its trailing slash; anything else is a UserError."""
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(f"--base_url {redact(url)!r} is not an http(s) URL; write e.g. http://127.0.0.1:8000/v1")
    register_url(url)  # credentials in a URL (userinfo, query tokens, key-like segments) are hidden wherever they show
    return url.rstrip("/")


def url_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its userinfo, and the ``Authorization`` value the userinfo stands for (HTTP Basic), or None.

    Clients send the credentials as a header instead of inside the URL: aiohttp refuses a URL with credentials
    beside an ``Authorization`` header, and a URL without them is safe to show."""
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    header = "Basic " + base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")
    register_secret(header.removeprefix("Basic "))  # the encoded password is as secret as the password
    return urlunsplit(parts._replace(netloc=host)), header


def normalize_base_url(url: str) -> str:
    """An OpenAI-style base URL: 'http://h:8000' -> 'http://h:8000/v1'; a URL with a path is kept as given."""
    url = validate_url(url)
    return url if urlsplit(url).path.strip("/") else url + "/v1"


def split_urls(values: list[str] | tuple[str, ...] | str | None, *, openai_style: bool = True) -> list[str]:
    """Flatten repeated and comma-separated --base_url values, keeping order and dropping duplicates.

    ``openai_style`` adds the /v1 an OpenAI-style base URL needs when the URL has no path."""
    if values is None:
        return []
    items = [values] if isinstance(values, str) else list(values)
    out: list[str] = []
    for item in items:
        for part in str(item).split(","):
            if part.strip():
                url = normalize_base_url(part) if openai_style else validate_url(part)
                if url not in out:
                    out.append(url)
    return out


@dataclass
class Endpoint:
    url: str  # without credentials
    auth: str | None = None  # the Authorization header the URL's userinfo stands for
    in_flight: int = 0
    failures: int = 0  # consecutive
    times_out: int = 0
    out_until: float = -math.inf

    @property
    def chat_url(self) -> str:
        base, q, query = self.url.partition("?")  # a gateway's ?query stays after the path
        return f"{base.rstrip('/')}/chat/completions{q}{query}"


@dataclass
class EndpointPool:
    urls: list[str]
    clock: Clock = field(default_factory=RealClock)
    max_failures: int = 2
    cooldown_s: float = 5.0
    max_cooldown_s: float = 120.0

    def __post_init__(self) -> None:
        if not self.urls:
            raise UserError("no server URL: pass --base_url URL (repeatable or comma-separated)")
        self.endpoints = [Endpoint(*url_credentials(u)) for u in self.urls]
        self._turn = 0

    def pick(self) -> Endpoint:
        now = self.clock.monotonic()
        # a server back from a cool-down takes one probe request at a time until it answers
        live = [e for e in self.endpoints if e.out_until <= now and not (e.times_out and e.in_flight)]
        if not live:
            return min(self.endpoints, key=lambda e: e.out_until)
        fewest = min(e.in_flight for e in live)
        candidates = [e for e in live if e.in_flight == fewest]
        self._turn = (self._turn + 1) % len(candidates)
        return candidates[self._turn]

    def start(self, ep: Endpoint) -> None:
        ep.in_flight += 1

    def finish(self, ep: Endpoint, error: AttemptError | None) -> None:
        ep.in_flight -= 1
        if error is None:
            ep.failures = 0
            ep.times_out = 0
            ep.out_until = -math.inf
            return
        if not self._server_down(error):  # it answered (400, 429, a bad body...): the server itself is alive
            ep.failures = 0
            return
        ep.failures += 1
        on_probation = ep.times_out > 0  # back from a cool-down without a success yet: one failure sends it out
        if on_probation or ep.failures >= self.max_failures:
            ep.times_out += 1
            ep.failures = 0
            ep.out_until = self.clock.monotonic() + capped_backoff(self.cooldown_s, self.max_cooldown_s,
                                                                   ep.times_out - 1)

    @staticmethod
    def _server_down(error: AttemptError) -> bool:
        return error.kind in ("connection", "timeout") or (error.kind == "http"
                                                          and error.status_code in SERVER_DOWN_STATUSES)

    def live_count(self) -> int:
        now = self.clock.monotonic()
        return sum(1 for e in self.endpoints if e.out_until <= now)
