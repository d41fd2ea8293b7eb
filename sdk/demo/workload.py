"""A realistic agent workload for ``agentlat demo``: real openai and anthropic clients,
instrumented by the SDK, against the local fake model server.

One process per service (each has its own ``service.name``), running five agent types:

- chat assistant (``/chat``, TTFT-bound, short streamed answers);
- reasoning/code (``/code``, long outputs, half of them with speculative decoding);
- tool agent (``/tools``, serial or parallel tool calls, streamed tool calls, speculative
  prefetch hits and misses);
- long-context RAG (``/rag``, 20k-token prompts; prompt-cache hits answer much sooner);
- multimodal (``/vision``, the Responses API with a slower first token).

Timings are drawn from seeded lognormal distributions and sent to the fake server as
``x-fake-*`` headers, so TTFT and ITL in the spans are the ones the server produced.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

import agentlat

SERVICES = {
    "support-bot": ("chat", "rag", "tools"),
    "code-assistant": ("code", "chat", "tools"),
    "research-agent": ("rag", "vision", "tools", "code"),
}
STABLE_SYSTEM_PROMPT = "You are a careful assistant. Answer with sources. " * 40


@dataclass(frozen=True, slots=True)
class Fake:
    """Per-call instructions to the fake model server."""

    ttft_ms: float
    itl_ms: float
    chunks: int
    input_tokens: int = 400
    cached_tokens: int = 0
    tool_calls: tuple[str, ...] = ()

    def headers(self) -> dict[str, str]:
        headers = {
            "x-fake-ttft-ms": f"{self.ttft_ms:.1f}",
            "x-fake-itl-ms": f"{self.itl_ms:.2f}",
            "x-fake-itl-jitter-ms": f"{self.itl_ms / 4:.2f}",
            "x-fake-chunks": str(self.chunks),
            "x-fake-input-tokens": str(self.input_tokens),
            "x-fake-cached-tokens": str(self.cached_tokens),
        }
        if self.tool_calls:
            headers["x-fake-tool-calls"] = ",".join(self.tool_calls)
        return headers


def lognormal(rng: random.Random, median: float, spread: float = 0.35) -> float:
    return median * math.exp(rng.gauss(0, spread))


class Agents:
    """The five agent types, each one run of an agent as a method."""

    def __init__(self, fake_url: str, rng: random.Random) -> None:
        import anthropic
        import openai

        self.rng = rng
        self.openai = openai.OpenAI(base_url=f"{fake_url}/v1", api_key="demo", max_retries=0)
        self.async_openai = openai.AsyncOpenAI(base_url=f"{fake_url}/v1", api_key="demo", max_retries=0)
        self.anthropic = anthropic.Anthropic(base_url=fake_url, api_key="demo", max_retries=0)
        self.http = httpx.Client(base_url=fake_url, timeout=60)
        self._cache_warm = False

    def _chat(self, model: str, fake: Fake, *, tools: bool = False) -> object:
        kwargs = {}
        if tools:
            kwargs["tools"] = [
                {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
                for n in ("search", "fetch_page", "weather", "sql")
            ]
        stream = self.openai.chat.completions.create(
            model=model,
            messages=[{"role": "system", "content": STABLE_SYSTEM_PROMPT}, {"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=fake.headers(),
            **kwargs,
        )
        return [chunk for chunk in stream]

    def chat(self) -> None:
        with agentlat.agent("assistant", route="/chat"):
            fake = Fake(lognormal(self.rng, 450), lognormal(self.rng, 22, 0.2), self.rng.randint(20, 80))
            self._chat(self.rng.choice(["gpt-4o-mini", "gpt-4o"]), fake)

    def code(self) -> None:
        """A self-hosted code model behind a plain HTTP client: the manual ModelCall API."""
        speculative = self.rng.random() < 0.5
        with agentlat.agent("coder", route="/code"):
            itl = lognormal(self.rng, 9 if speculative else 16, 0.2)
            chunks = self.rng.randint(150, 320)
            fake = Fake(lognormal(self.rng, 900), itl, chunks, input_tokens=1800)
            body = {"model": "qwen-coder-32b", "stream": True, "messages": [{"role": "user", "content": "refactor"}]}
            with agentlat.model_call("qwen-coder-32b", provider="vllm", stream=True) as call:
                with self.http.stream("POST", "/v1/chat/completions", json=body, headers=fake.headers()) as answer:
                    for line in answer.iter_lines():
                        if _has_content(line):
                            call.chunk(tokens=3)
                call.usage(input_tokens=1800, output_tokens=chunks * 3)
                if speculative:
                    proposed = chunks * 4
                    call.speculative(proposed=proposed, accepted=int(proposed * self.rng.uniform(0.55, 0.8)))

    def tools(self) -> None:
        with agentlat.agent("researcher", route="/tools"):
            plan = Fake(lognormal(self.rng, 350), 15, 6, tool_calls=("search", "fetch_page"))
            self._chat("gpt-4o", plan, tools=True)
            ready = time.time_ns()  # the streamed tool call's arguments were complete
            time.sleep(lognormal(self.rng, 0.02))  # orchestration before the first tool starts
            if self.rng.random() < 0.5:
                self._serial_tools(ready)
            else:
                asyncio.run(self._parallel_tools())
            self._prefetch()
            self._chat("gpt-4o", Fake(lognormal(self.rng, 300), 18, self.rng.randint(15, 40)))

    def _tool(self, name: str, call_id: str, seconds: float, **kwargs: object) -> None:
        with agentlat.tool(name, call_id=call_id, **kwargs):
            time.sleep(seconds)

    def _serial_tools(self, args_ready_ns: int) -> None:
        self._tool("search", "c1", lognormal(self.rng, 0.25), args_ready_ns=args_ready_ns)
        self._tool("fetch_page", "c2", lognormal(self.rng, 0.35))  # independent of search: could run in parallel
        if self.rng.random() < 0.5:
            self._tool("summarise", "c3", lognormal(self.rng, 0.1), depends_on=["c2"])

    async def _parallel_tools(self) -> None:
        async def tool(name: str, call_id: str, seconds: float) -> None:
            async with agentlat.tool(name, call_id=call_id):
                await asyncio.sleep(seconds)

        await asyncio.gather(tool("search", "c1", lognormal(self.rng, 0.25)), tool("fetch_page", "c2", 0.3))

    def _prefetch(self) -> None:
        with agentlat.prefetch("weather", call_id="p1") as guess:
            time.sleep(lognormal(self.rng, 0.08))
            if self.rng.random() < 0.6:
                guess.hit()
            else:
                guess.miss()

    def rag(self) -> None:
        hit = self._cache_warm and self.rng.random() < 0.7
        self._cache_warm = True
        tokens = self.rng.randint(18_000, 26_000)
        fake = Fake(
            lognormal(self.rng, 350 if hit else 1900), lognormal(self.rng, 20, 0.2), self.rng.randint(30, 90),
            input_tokens=tokens, cached_tokens=int(tokens * 0.9) if hit else 0,
        )  # fmt: skip
        with agentlat.agent("rag", route="/rag"):
            self._tool("retrieve", "r1", lognormal(self.rng, 0.12))
            stream = self.anthropic.messages.create(
                model="claude-sonnet-4", max_tokens=512, stream=True,
                system=STABLE_SYSTEM_PROMPT, messages=[{"role": "user", "content": "question over documents"}],
                extra_headers=fake.headers(),
            )  # fmt: skip
            for _ in stream:
                pass

    def vision(self) -> None:
        with agentlat.agent("describer", route="/vision"):
            fake = Fake(lognormal(self.rng, 1400), lognormal(self.rng, 25, 0.2), self.rng.randint(20, 60), 2500)
            stream = self.openai.responses.create(
                model="gpt-4o", input="describe the attached image", stream=True, extra_headers=fake.headers()
            )
            for _ in stream:
                pass


def _has_content(sse_line: str) -> bool:
    """An OpenAI-style SSE line carrying output text (not the role-only first chunk, not [DONE])."""
    if not sse_line.startswith("data: {"):
        return False
    choices = json.loads(sse_line[6:]).get("choices") or [{}]
    return bool(choices[0].get("delta", {}).get("content"))


def run_service(
    service: str, endpoint: str, fake_url: str, rate: float, duration: float, seed: int,
    progress: Callable[[], None] = lambda: None,
) -> int:  # fmt: skip
    """Run agents of ``service`` at ``rate`` runs/s for ``duration`` s (0: until stopped)."""
    agentlat.init(service=service, endpoint=endpoint, version="1.4.2", environment="demo")
    rng = random.Random(seed)
    agents = Agents(fake_url, rng)
    kinds = SERVICES[service]
    done = 0
    lock = threading.Lock()

    def one(kind: str) -> None:
        nonlocal done
        try:
            getattr(agents, kind)()
        except Exception as exc:  # a failed demo run is shown, not fatal
            print(f"demo: {service} {kind} failed: {exc}", flush=True)
        with lock:
            done += 1
        progress()

    deadline = time.monotonic() + duration if duration else math.inf
    with ThreadPoolExecutor(max_workers=32) as pool:
        next_at = time.monotonic()
        while time.monotonic() < deadline:
            pool.submit(one, rng.choice(kinds))
            next_at += rng.expovariate(rate)
            time.sleep(max(0.0, next_at - time.monotonic()))
    agentlat.shutdown()
    return done
