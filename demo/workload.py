"""A realistic agent workload for ``agentlat demo``: real openai and anthropic clients,
instrumented by the SDK, against the local fake model server.

One process per service (each has its own ``service.name``), running six agent types:

- chat assistant (``/chat``, TTFT-bound, short streamed answers); most of its prompts put the
  current time *before* the stable system prompt, so they miss the prompt cache (hit rate about
  20-30 %, the advisor's prompt-cache lever);
- reasoning/code (``/code``, long outputs, half of them with speculative decoding);
- tool agent (``/tools``, serial or parallel tool calls, streamed tool calls, speculative
  prefetch hits and misses); 70 % of its runs call two independent tools one after the other
  (the parallel-tools what-if and lever);
- planner (``/tools-eager`` and ``/tools-wait``): a model streams two tool calls and the agent
  parses the stream itself (the manual ModelCall API, ``call.tool_call_ready``); on
  ``/tools-eager`` each tool starts the moment its call's arguments are complete, on
  ``/tools-wait`` only once the message has ended, so the dispatch what-if and the advisor's
  "dispatch tool calls as they stream" lever show on the second;
- long-context RAG (``/rag``, 20k-token prompts over a stable handbook, so prompt-cache hits
  answer much sooner); its vector and keyword searches run one after the other though
  independent;
- multimodal (``/vision``, the Responses API with a slower first token).

**Orchestration.** Between their model and tool calls, inside the agent span, agents do their own
work: building prompts, parsing tool arguments, post-processing retrieved passages, guardrail and
citation checks. Each step is a sleep of the time such work takes (drawn per agent, so the
orchestration share of E2E differs by route: about 6 % on ``/chat``, 8 % on ``/vision``, 12 % on
``/code``, 15-20 % on ``/rag`` and 20 % on ``/tools``; the planner adds none of its own).

**Prompt cache.** The fake server reports the cached tokens it is told to, so the workload plays
the provider's cache (``PromptCache``): a prompt's stable prefix is read from cache when the same
prefix was last sent no longer ago than the cache lives (``CACHE_TTL_S``: 30 s, short so that
expiries show within minutes; the SDK is told so, as an account with another lifetime would tell it).
Every agent but the chat assistant keeps its prefix stable and hits on 80 % or more of its input
tokens. Each reason a call misses shows: the chat assistant's time stamp before its system prompt
(the system prompt changed, near its start), its rare escalations to Claude (the route's previous
Claude call is older than the cache lives: expired), the tool agent's tool definitions sent in
another order now and then (tools changed) and its short intent classifier (below the provider's
minimum cacheable prompt), and the first call of every route (cold).

Timings are drawn from seeded lognormal distributions and sent to the fake server as
``x-fake-*`` headers, so TTFT and ITL in the spans are the ones the server produced. Each run draws
from a generator of its own, seeded from the service's seed in the order runs are scheduled, so a
seed gives the same runs however the threads interleave.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import httpx

import agentlat

SERVICES = {
    "support-bot": ("chat", "rag", "tools", "planner"),
    "code-assistant": ("code", "chat", "tools", "planner"),
    "research-agent": ("rag", "vision", "tools", "code", "planner"),
}
# The releases each service runs side by side (a canary), sharing its traffic. support-bot's newer release
# regressed /tools: fetch_page gained a parameter that makes it fetch the whole page, and the planning prompt
# grew, so its first token comes later; `agentlat compare --release 1.4.1 1.4.2 --route /tools` shows both.
RELEASES = {"support-bot": ("1.4.1", "1.4.2"), "code-assistant": ("1.4.2",), "research-agent": ("1.4.2",)}
REGRESSED = ("support-bot", "1.4.2")
FETCH_PAGE_S = {False: 0.35, True: 0.8}  # fetch_page's median, before and in the regressed release
LONGER_PROMPT_TTFT_MS = 150  # what the regressed release's longer planning prompt adds to its TTFT
STABLE_SYSTEM_PROMPT = "You are a careful assistant. Answer with sources. " * 40
SYSTEM_TOKENS = 3072  # the system prompt and tool definitions, as the fake server counts them
# The regressed release's planning prompt: the stable one and a new instruction, 1,200 tokens longer.
LONGER_SYSTEM_PROMPT = STABLE_SYSTEM_PROMPT + "Cite the page and paragraph of every source you use. " * 20
LONGER_SYSTEM_TOKENS = SYSTEM_TOKENS + 1200
HANDBOOK_TOKENS = 20_000  # the RAG agent's stable long context
REPOSITORY_MAP, HANDBOOK, VISION_INSTRUCTIONS = "repository map", "handbook", "describe instructions"  # stand-ins
ESCALATION_SYSTEM_PROMPT = "You are the expert reviewer. Reason step by step, then answer. " * 40
PREFILL_MS_PER_TOKEN = 0.05  # the TTFT a cached prompt token saves (prefill at 20k tokens/s)
CACHE_TTL_S = 30.0  # how long the demo's provider keeps a prefix after its last use
TOOLS = ("search", "fetch_page", "weather", "sql")


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


class PromptCache:
    """The provider's prompt cache, played by the workload: a prompt's prefix is read from cache when the same
    prefix was last used at most ``ttl_s`` ago (each use refreshes it). It starts warm with ``warm`` (the agents
    have been running for a while), so a short run shows the hit rates of a long one; it keeps the latest
    ``size`` prefixes."""

    def __init__(self, warm: tuple[str, ...] = (), size: int = 1024, ttl_s: float = CACHE_TTL_S) -> None:
        now = time.monotonic()
        self._used = dict.fromkeys(warm, now)  # prefix -> last use, insertion-ordered: the oldest is evicted first
        self._size, self._ttl_s = size, ttl_s
        self._lock = threading.Lock()

    def apply(self, fake: Fake, prefix: str, prefix_tokens: int) -> Fake:
        """``fake`` sent with a prompt that starts with ``prefix`` (``prefix_tokens`` of its input): on a hit
        those tokens are cached and the first token comes sooner."""
        with self._lock:
            now = time.monotonic()
            last = self._used.pop(prefix, None)
            hit = last is not None and now - last <= self._ttl_s
            self._used[prefix] = now
            if len(self._used) > self._size:
                del self._used[next(iter(self._used))]
        if not hit:
            return fake
        cached = min(prefix_tokens, fake.input_tokens)
        return replace(
            fake, ttft_ms=max(fake.ttft_ms / 4, fake.ttft_ms - cached * PREFILL_MS_PER_TOKEN), cached_tokens=cached
        )


class Agents:
    """The six agent types, each one run of an agent as a method."""

    def __init__(self, fake_url: str, rng: random.Random, regressed: bool = False) -> None:
        import anthropic
        import openai

        self._rng = rng
        self.regressed = regressed  # the release that made /tools slower (REGRESSED)
        self._run = threading.local()
        warm = (f"|{STABLE_SYSTEM_PROMPT}", f"{','.join(TOOLS)}|{STABLE_SYSTEM_PROMPT}", ESCALATION_SYSTEM_PROMPT)
        self.cache = PromptCache(warm=(*warm, REPOSITORY_MAP, HANDBOOK, VISION_INSTRUCTIONS))
        self.openai = openai.OpenAI(base_url=f"{fake_url}/v1", api_key="demo", max_retries=0)
        self.async_openai = openai.AsyncOpenAI(base_url=f"{fake_url}/v1", api_key="demo", max_retries=0)
        self.anthropic = anthropic.Anthropic(base_url=fake_url, api_key="demo", max_retries=0)
        self.http = httpx.Client(base_url=fake_url, timeout=60)

    @property
    def rng(self) -> random.Random:
        """The generator of the run this thread is doing (see ``run``), else the service's."""
        return getattr(self._run, "rng", None) or self._rng

    def run(self, kind: str, seed: int) -> None:
        """One run of agent ``kind``, its draws from ``random.Random(seed)``."""
        self._run.rng = random.Random(seed)
        try:
            getattr(self, kind)()
        finally:
            self._run.rng = None

    def _step(self, median_s: float, spread: float = 0.3) -> None:
        """Orchestration: the agent's own work between model and tool calls (the caller names it), taking
        the time such work takes in production agents."""
        time.sleep(lognormal(self.rng, median_s, spread))

    def _chat(
        self, model: str, fake: Fake, *, tools: tuple[str, ...] = (), system: str = STABLE_SYSTEM_PROMPT,
        system_tokens: int = SYSTEM_TOKENS,
    ) -> object:  # fmt: skip
        """A streamed Chat Completions call; its tools (in this order) and ``system`` are looked up in the prompt
        cache (``system_tokens`` long)."""
        prefix = f"{','.join(tools)}|{system}"
        fake = self.cache.apply(replace(fake, input_tokens=system_tokens + fake.input_tokens), prefix, system_tokens)
        kwargs = {}
        if tools:
            kwargs["tools"] = [
                {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
                for n in tools
            ]
        stream = self.openai.chat.completions.create(
            model=model,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=fake.headers(),
            **kwargs,
        )
        return [chunk for chunk in stream]

    def chat(self) -> None:
        """Most runs put the current time before the system prompt: a new prefix each time, a cache miss. One in
        twenty hands a hard question to Claude, rarely enough that its cached prefix has expired."""
        with agentlat.agent("assistant", route="/chat"):
            system = STABLE_SYSTEM_PROMPT
            if self.rng.random() < 0.7:
                system = f"Current time: {datetime.now(UTC).isoformat()}.\n{system}"
            self._step(0.04)  # input guardrail: PII and jailbreak patterns over the user's message
            fake = Fake(lognormal(self.rng, 450), lognormal(self.rng, 22, 0.2), self.rng.randint(20, 80), 200)
            if self.rng.random() < 0.05:
                self._escalate(fake)
            else:
                self._chat("gpt-4o-mini", fake, system=system)
            self._step(0.05)  # output moderation and markdown clean-up

    def _escalate(self, fake: Fake) -> None:
        """A streamed Claude call whose system prompt is marked for the cache (a breakpoint, the default lifetime)."""
        fake = replace(fake, ttft_ms=fake.ttft_ms * 1.6, input_tokens=SYSTEM_TOKENS + fake.input_tokens)
        fake = self.cache.apply(fake, ESCALATION_SYSTEM_PROMPT, SYSTEM_TOKENS)
        system = [{"type": "text", "text": ESCALATION_SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}}]
        stream = self.anthropic.messages.create(
            model="claude-sonnet-4-5", max_tokens=512, stream=True, system=system,
            messages=[{"role": "user", "content": "a hard question"}], extra_headers=fake.headers(),
        )  # fmt: skip
        for _ in stream:
            pass

    def code(self) -> None:
        """A self-hosted code model behind a plain HTTP client: the manual ModelCall API."""
        speculative = self.rng.random() < 0.5
        with agentlat.agent("coder", route="/code"):
            self._step(0.15)  # build the prompt: the open files, the repository map, token counting
            itl = lognormal(self.rng, 9 if speculative else 16, 0.2)
            chunks = self.rng.randint(150, 320)
            fake = Fake(lognormal(self.rng, 900), itl, chunks, input_tokens=4000)
            fake = self.cache.apply(fake, REPOSITORY_MAP, 3400)
            body = {"model": "qwen-coder-32b", "stream": True, "messages": [{"role": "user", "content": "refactor"}]}
            with agentlat.model_call("qwen-coder-32b", provider="vllm", stream=True) as call:
                with self.http.stream("POST", "/v1/chat/completions", json=body, headers=fake.headers()) as answer:
                    for line in answer.iter_lines():
                        if _has_content(line):
                            call.chunk(tokens=3)
                call.usage(
                    input_tokens=fake.input_tokens, output_tokens=chunks * 3, cache_read_tokens=fake.cached_tokens
                )
                if speculative:
                    proposed = chunks * 4
                    call.speculative(proposed=proposed, accepted=int(proposed * self.rng.uniform(0.55, 0.8)))
            self._step(0.3)  # parse the diff, apply it to a scratch tree, run the formatter and linter

    def tools(self) -> None:
        with agentlat.agent("researcher", route="/tools"):
            self._step(0.05)  # build the prompt: conversation history, tool schemas
            self._classify_intent()
            ttft = lognormal(self.rng, 350) + (LONGER_PROMPT_TTFT_MS if self.regressed else 0)
            plan = Fake(ttft, 15, 6, 200, tool_calls=("search", "fetch_page"))
            tools = TOOLS if self.rng.random() < 0.95 else tuple(self.rng.sample(TOOLS, len(TOOLS)))  # a set, unordered
            if self.regressed:
                self._chat("gpt-4o", plan, tools=tools, system=LONGER_SYSTEM_PROMPT, system_tokens=LONGER_SYSTEM_TOKENS)
            else:
                self._chat("gpt-4o", plan, tools=tools)
            self._step(0.06)  # parse and validate the tool calls' JSON arguments
            if self.rng.random() < 0.7:
                self._serial_tools()
            else:
                asyncio.run(self._parallel_tools())
            self._prefetch()
            self._step(0.2)  # fold the tool results into the prompt: dedupe, truncate to the token budget
            self._chat("gpt-4o", Fake(lognormal(self.rng, 300), 18, self.rng.randint(15, 40), 600))
            self._step(0.06)  # validate the answer against the output schema

    def _classify_intent(self) -> None:
        """A short prompt (150 tokens, under the 1,024 OpenAI caches): it never hits, whatever its prefix."""
        fake = Fake(lognormal(self.rng, 180), 12, 2, input_tokens=150)
        self.openai.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "system", "content": "Classify the intent."}],
            extra_headers=fake.headers(),
        )  # fmt: skip

    def _tool(self, name: str, call_id: str, seconds: float, **kwargs: object) -> None:
        with agentlat.tool(name, call_id=call_id, **kwargs):
            time.sleep(seconds)

    def _serial_tools(self) -> None:
        self._tool("search", "c1", lognormal(self.rng, 0.25))
        self._step(0.04)  # post-process the search hits
        # independent of search: could run in parallel
        self._tool("fetch_page", "c2", lognormal(self.rng, FETCH_PAGE_S[self.regressed]))
        if self.rng.random() < 0.5:
            self._tool("summarise", "c3", lognormal(self.rng, 0.1), depends_on=["c2"])

    async def _parallel_tools(self) -> None:
        async def tool(name: str, call_id: str, seconds: float) -> None:
            async with agentlat.tool(name, call_id=call_id):
                await asyncio.sleep(seconds)

        fetch_s = lognormal(self.rng, FETCH_PAGE_S[self.regressed])
        await asyncio.gather(tool("search", "c1", lognormal(self.rng, 0.25)), tool("fetch_page", "c2", fetch_s))

    def planner(self) -> None:
        """Two streamed tool calls, started as their arguments complete (``/tools-eager``) or after the
        message (``/tools-wait``); the tools run beside the model call, in the agent's context."""
        eager = self.rng.random() < 0.5
        with agentlat.agent("planner", route="/tools-eager" if eager else "/tools-wait"):
            agent_context = contextvars.copy_context()
            fake = Fake(lognormal(self.rng, 300), 40, 12, tool_calls=("search", "fetch_page"))
            seconds = {"search": lognormal(self.rng, 0.3, 0.2), "fetch_page": lognormal(self.rng, 0.12, 0.2)}
            running: list[threading.Thread] = []
            waiting: list[tuple[str, str]] = []
            with agentlat.model_call("gpt-4o", provider="openai", stream=True) as call:
                for call_id, name in self._streamed_tool_calls(call, fake):
                    call.tool_call_ready(call_id, name)
                    if eager:
                        running.append(_in_thread(agent_context, self._tool, name, call_id, seconds[name]))
                    else:
                        waiting.append((call_id, name))
            if waiting:
                time.sleep(lognormal(self.rng, 0.02))  # orchestration: read the whole message, then dispatch
                running = [_in_thread(agent_context, self._tool, n, c, seconds[n]) for c, n in waiting]
            for thread in running:
                thread.join()
            self._chat("gpt-4o", Fake(lognormal(self.rng, 300), 18, self.rng.randint(15, 40)))

    def _streamed_tool_calls(self, call: agentlat.ModelCall, fake: Fake) -> Iterator[tuple[str, str]]:
        """Stream a Chat Completions answer over plain HTTP, feeding ``call``; yield (call id, tool name) of each
        tool call the moment its arguments are complete JSON."""
        tools = [
            {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in fake.tool_calls
        ]
        body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "plan"}], "tools": tools}
        calls: dict[int, list[str]] = {}  # index -> [id, name, arguments so far]
        with self.http.stream("POST", "/v1/chat/completions", json=body, headers=fake.headers()) as answer:
            for line in answer.iter_lines():
                if not line.startswith("data: {"):
                    continue
                delta = (json.loads(line[6:]).get("choices") or [{}])[0].get("delta") or {}
                if delta.get("content"):
                    call.chunk()
                for part in delta.get("tool_calls") or ():
                    call.chunk()
                    k, function = part["index"], part.get("function") or {}
                    if k not in calls:
                        calls[k] = [part.get("id") or f"#{k}", function.get("name") or "", ""]
                        call.tool_call_named(calls[k][0], calls[k][1], index=k)
                    calls[k][2] += function.get("arguments") or ""
                    if function.get("arguments") and _complete_json(calls[k][2]):
                        yield calls[k][0], calls[k][1]

    def _prefetch(self) -> None:
        with agentlat.prefetch("weather", call_id="p1") as guess:
            time.sleep(lognormal(self.rng, 0.08))
            if self.rng.random() < 0.6:
                guess.hit()
            else:
                guess.miss()

    def rag(self) -> None:
        """The handbook (stable, first) is cached after the first run; the retrieved passages follow it."""
        with agentlat.agent("rag", route="/rag"):
            self._tool("vector_search", "r1", lognormal(self.rng, 0.12))
            self._tool("keyword_search", "r2", lognormal(self.rng, 0.09))  # independent of the vector search
            self._step(0.4)  # rerank, dedupe and trim the passages, assemble the prompt
            tokens = HANDBOOK_TOKENS + self.rng.randint(500, 4_000)
            fake = Fake(lognormal(self.rng, 1900), lognormal(self.rng, 20, 0.2), self.rng.randint(30, 90), tokens)
            fake = self.cache.apply(fake, HANDBOOK, HANDBOOK_TOKENS)
            system = [{"type": "text", "text": STABLE_SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}}]
            stream = self.anthropic.messages.create(
                model="claude-sonnet-4", max_tokens=512, stream=True,
                system=system, messages=[{"role": "user", "content": "question over documents"}],
                extra_headers=fake.headers(),
            )  # fmt: skip
            for _ in stream:
                pass
            self._step(0.15)  # check each citation against the passages

    def vision(self) -> None:
        with agentlat.agent("describer", route="/vision"):
            self._step(0.2)  # decode, resize and re-encode the image
            fake = Fake(lognormal(self.rng, 1400), lognormal(self.rng, 25, 0.2), self.rng.randint(20, 60), 3400)
            fake = self.cache.apply(fake, VISION_INSTRUCTIONS, SYSTEM_TOKENS)
            stream = self.openai.responses.create(
                model="gpt-4o", input="describe the attached image", stream=True, extra_headers=fake.headers()
            )
            for _ in stream:
                pass


def _in_thread(context: contextvars.Context, run: Callable[..., None], *args: object) -> threading.Thread:
    """``run(*args)`` in a thread of its own, in a copy of ``context`` (so its spans have that parent)."""
    thread = threading.Thread(target=context.copy().run, args=(run, *args), daemon=True)
    thread.start()
    return thread


def _complete_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _has_content(sse_line: str) -> bool:
    """An OpenAI-style SSE line carrying output text (not the role-only first chunk, not [DONE])."""
    if not sse_line.startswith("data: {"):
        return False
    choices = json.loads(sse_line[6:]).get("choices") or [{}]
    return bool(choices[0].get("delta", {}).get("content"))


def run_service(
    service: str, release: str, endpoint: str, fake_url: str, rate: float, duration: float, seed: int,
    progress: Callable[[], None] = lambda: None,
) -> int:  # fmt: skip
    """Run agents of ``service`` at ``release`` at ``rate`` runs/s for ``duration`` s (0: until stopped)."""
    lifetimes = {"openai": CACHE_TTL_S, "anthropic": CACHE_TTL_S}  # the demo provider's, not the real ones'
    options = agentlat.Options(prompt_cache_ttl_s=lifetimes)
    agentlat.init(service=service, endpoint=endpoint, version=release, environment="demo", options=options)
    rng = random.Random(seed)
    agents = Agents(fake_url, rng, regressed=(service, release) == REGRESSED)
    kinds = SERVICES[service]
    done = 0
    lock = threading.Lock()

    def one(kind: str, seed: int) -> None:
        nonlocal done
        try:
            agents.run(kind, seed)
        except Exception as exc:  # a failed demo run is shown, not fatal
            print(f"demo: {service} {kind} failed: {exc}", flush=True)
        with lock:
            done += 1
        progress()

    deadline = time.monotonic() + duration if duration else math.inf
    with ThreadPoolExecutor(max_workers=32) as pool:
        next_at = time.monotonic()
        while time.monotonic() < deadline:
            pool.submit(one, rng.choice(kinds), rng.getrandbits(64))
            next_at += rng.expovariate(rate)
            time.sleep(max(0.0, next_at - time.monotonic()))
    agentlat.shutdown()
    return done
