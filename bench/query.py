"""Query latency and storage at scale: realistic spans generated in bulk straight into the store.

Issue targets: at most 100 ms per panel query and 50 ms for a trace by id at 10M spans over 7 days,
at most 60 bytes per realistic span on disk (issue 21; issue 9 asked 80), each dashboard page's queries under 300 ms
(bench/dashboard_queries.py), and in a browser the dashboard's first page within 2 s and a page switch
within 1 s (bench/dashboard_browser.py)::

    python bench/query.py --spans 10000000 [--data /tmp/agentlat-query] [--keep] [--reps 10]

Spans (10 per trace: an agent root, 4 streamed model calls, 5 tool calls, 12 attributes each, over
5 services, 8 routes, 4 models and 6 tools; start times spread over the 7 days ending now, in chronological
batches as a collector writes them) are built
with numpy and pyarrow, whole columns at a time, and inserted in batches with ``Store.insert_spans``
into a fresh embedded store, with one ``agentlat_traces`` row per trace and the per-minute rollups of
every minute. Then the store is closed, ``agentlat serve`` opens it, and each query-API call is timed
over HTTP as a user would see it right after ingest (no OPTIMIZE; background merges may still run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agentlat.store import SPAN_ARROW_SCHEMA, open_store
from agentlat.store.analysis import TRACE_ROW_SCHEMA
from agentlat.store.schema import empty_column

PROJECT = "default"  # the project of an unauthenticated server
SPANS_PER_TRACE = 10
DAY_S = 86_400
WINDOW_S = 7 * DAY_S
BATCH_SPANS = 500_000
ROLLUP_CHUNK_MINUTES = 360
PANEL_TARGET_MS = 100.0
TRACE_TARGET_MS = 50.0
BYTES_TARGET = 60.0  # issue 21 (issue 9: 80)
PAGE_TARGET_MS = 300.0

# Span k of every trace: 0 the agent root, then model, tool, model, tool, model, tool, model, tool, tool.
MODEL_SLOTS = (1, 3, 5, 7)
TOOL_SLOTS = (2, 4, 6, 8, 9)
ROUTES = ("/chat", "/search", "/code", "/rag", "/support", "/summarise", "/plan", "/extract")
ROUTE_WEIGHTS = np.array([0.3, 0.15, 0.12, 0.12, 0.1, 0.08, 0.08, 0.05])
ROUTE_SLOWNESS = np.array([1.0, 0.8, 1.6, 1.2, 1.0, 0.7, 2.0, 0.6])
ROUTE_SERVICE = np.array([0, 1, 2, 1, 3, 4, 2, 4])  # 8 routes served by 5 services
SERVICES = ("chat-api", "search-api", "coder", "rag-worker", "batch-jobs")
AGENTS = ("assistant", "researcher", "coder", "retriever", "support", "summariser", "planner", "extractor")
RELEASES = ("1.14.2", "1.15.0")  # every service's release: the second for the last day
MODELS = ("gpt-4o", "claude-sonnet-4", "llama-3.1-70b", "gemini-1.5-pro")
MODEL_PROVIDERS = ("openai", "anthropic", "vllm", "gcp.gemini")
MODEL_TTFT_MS = np.array([380.0, 520.0, 240.0, 610.0])
MODEL_ITL_MS = np.array([18.0, 24.0, 12.0, 28.0])
TOOLS = ("web_search", "fetch_url", "sql_query", "calculator", "browser", "code_exec")
TOOL_MEDIAN_MS = np.array([320.0, 480.0, 85.0, 4.0, 1400.0, 900.0])

MAP_TYPE = pa.map_(pa.string(), pa.string())
TS_NS = pa.timestamp("ns", tz="UTC")
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


# --- vectorised column builders ------------------------------------------------------
def hex_ids(rng: np.random.Generator, n: int, nbytes: int, prefix: str = "") -> pa.StringArray:
    """n random lowercase hex strings of 2*nbytes characters after ``prefix``, without a loop per value."""
    raw = rng.integers(0, 256, (n, nbytes), dtype=np.uint8)
    chars = np.stack([_HEX[raw >> 4], _HEX[raw & 15]], axis=2).reshape(n, 2 * nbytes)
    if prefix:
        head = np.frombuffer(prefix.encode(), dtype=np.uint8)
        chars = np.concatenate([np.broadcast_to(head, (n, head.size)), chars], axis=1)
    width = chars.shape[1]
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(chars)))


def pick(values: tuple[str, ...], index: np.ndarray) -> pa.Array:
    return pc.take(pa.array(values), pa.array(index))


def as_text(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(values), pa.string())


def prefixed(prefix: str, values: np.ndarray) -> pa.Array:
    return pc.binary_join_element_wise(prefix, as_text(values), "")


def string_map(slots: list[tuple[pa.Array, pa.Array]], n: int) -> pa.MapArray:
    """A map of len(slots) entries per row; slot j holds (key column, value column), each of length n."""
    width = len(slots)
    order = pa.array((np.arange(width)[None, :] * n + np.arange(n)[:, None]).ravel())
    keys = pc.take(pa.concat_arrays([pa.array(k, pa.string()) for k, _ in slots]), order)
    values = pc.take(pa.concat_arrays([pa.array(v, pa.string()) for _, v in slots]), order)
    return pa.MapArray.from_arrays(pa.array(np.arange(0, (n + 1) * width, width, dtype=np.int32)), keys, values)


def by_role(role: np.ndarray, agent: pa.Array, model: pa.Array, tool: pa.Array) -> pa.Array:
    """Per span, the agent, model or tool column's value (role 0, 1, 2); each column is full length."""
    return pc.if_else(pa.array(role == 0), agent, pc.if_else(pa.array(role == 1), model, tool))


def const(value: str, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, pa.string()), n)


def masked(values: np.ndarray, mask: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    """values where mask, NULL elsewhere ('not reported')."""
    return pa.array(values, arrow_type, mask=~mask)


# --- one batch of traces ----------------------------------------------------------------
def generate(rng: np.random.Generator, n_traces: int, first_s: int, last_s: int) -> tuple[pa.Table, pa.Table]:
    """Spans and per-trace rows of n_traces traces starting in [first_s, last_s)."""
    T, K = n_traces, SPANS_PER_TRACE
    n = T * K
    trace_of = np.repeat(np.arange(T), K)
    role = np.zeros(K, dtype=np.int8)
    role[list(MODEL_SLOTS)], role[list(TOOL_SLOTS)] = 1, 2
    role = np.tile(role, T)  # 0 agent, 1 model, 2 tool
    is_model, is_tool, is_root = role == 1, role == 2, role == 0

    route_t = rng.choice(len(ROUTES), T, p=ROUTE_WEIGHTS)
    slow_t = ROUTE_SLOWNESS[route_t]
    route = route_t[trace_of]
    service = ROUTE_SERVICE[route]
    model = rng.choice(len(MODELS), n, p=[0.45, 0.3, 0.15, 0.1])
    tool = rng.integers(0, len(TOOLS), n)

    # Model calls: TTFT, then output tokens at the inter-token latency.
    ttft = rng.lognormal(np.log(MODEL_TTFT_MS[model] * ROUTE_SLOWNESS[route]), 0.45)
    out_tokens = np.maximum(1, rng.lognormal(np.log(180.0), 0.8, n)).astype(np.uint64)
    itl = MODEL_ITL_MS[model] * rng.lognormal(0.0, 0.15, n)
    decode = out_tokens * itl
    in_tokens = np.maximum(50, rng.lognormal(np.log(3500.0), 0.9, n)).astype(np.uint64)
    cached = rng.random(n) < 0.6
    cache_read = np.where(cached, (in_tokens * rng.uniform(0.3, 0.95, n)).astype(np.uint64), 0).astype(np.uint64)
    stalls = (rng.random(n) < 0.05).astype(np.uint32) * rng.integers(1, 4, n).astype(np.uint32)
    itl_p50, itl_p95 = itl * 0.9, itl * 2.2
    itl_max = itl * 4 + stalls * rng.uniform(200, 900, n)
    model_ms = ttft + decode
    tool_ms = rng.lognormal(np.log(TOOL_MEDIAN_MS[tool] * ROUTE_SLOWNESS[route]), 0.8)
    child_ms = np.where(is_model, model_ms, tool_ms).reshape(T, K)[:, 1:]
    child_ns = np.maximum(1, np.rint(child_ms * 1e6)).astype(np.int64)
    gap_ns = rng.integers(1_000_000, 20_000_000, (T, K - 1))
    offset_ns = np.cumsum(gap_ns + child_ns, axis=1) - child_ns  # children one after another
    root_ns = offset_ns[:, -1] + child_ns[:, -1] + rng.integers(1_000_000, 10_000_000, T)
    start_t = rng.integers(first_s * 10**9, last_s * 10**9, T, dtype=np.int64)
    start = np.repeat(start_t, K) + np.column_stack([np.zeros(T, np.int64), offset_ns]).ravel()
    duration = np.column_stack([root_ns, child_ns]).ravel().astype(np.uint64)
    error = is_tool & (rng.random(n) < 0.01)

    trace_id = hex_ids(rng, T, 16)
    span_id = hex_ids(rng, n, 8)
    trace_ids = pc.take(trace_id, pa.array(trace_of))
    parent = pc.if_else(pa.array(is_root), const("", n), pc.take(span_id, pa.array(trace_of * K)))
    conversation = pc.take(prefixed("conv_", rng.integers(1, 2_000_000, T)), pa.array(trace_of))
    call_id = hex_ids(rng, n, 12, "call_")
    route_a, model_a, tool_a = pick(ROUTES, route), pick(MODELS, model), pick(TOOLS, tool)
    agent_a = pick(AGENTS, route)
    provider_a = pick(MODEL_PROVIDERS, model)
    nothing = const("", n)

    attrs = string_map(
        [
            (pick(("gen_ai.operation.name",) * 3, role), pick(("invoke_agent", "chat", "execute_tool"), role)),
            (
                pick(("gen_ai.agent.name", "gen_ai.provider.name", "gen_ai.tool.name"), role),
                by_role(role, agent_a, provider_a, tool_a),
            ),
            (pick(("agentlat.route",) * 3, role), route_a),
            (
                pick(("gen_ai.conversation.id", "gen_ai.request.model", "gen_ai.tool.call.id"), role),
                by_role(role, conversation, model_a, call_id),
            ),
            (
                pick(("http.request.method", "gen_ai.response.model", "gen_ai.tool.type"), role),
                by_role(
                    role,
                    const("POST", n),
                    pc.binary_join_element_wise(model_a, "2024-08-06", "-"),
                    const("function", n),
                ),
            ),
            (
                pick(("http.route", "gen_ai.usage.input_tokens", "http.request.method"), role),
                by_role(role, route_a, as_text(in_tokens), const("GET", n)),
            ),
            (
                pick(("user.id", "gen_ai.usage.output_tokens", "server.address"), role),
                by_role(
                    role, prefixed("user_", rng.integers(1, 50_000, n)), as_text(out_tokens), const("tools.internal", n)
                ),
            ),
            (
                pick(("session.id", "gen_ai.usage.cache_read.input_tokens", "http.response.status_code"), role),
                by_role(role, hex_ids(rng, n, 8), as_text(cache_read), pick(("200", "500"), error.astype(np.int8))),
            ),
            (
                pick(("enduser.tier", "gen_ai.response.id", "tool.args.size"), role),
                by_role(
                    role,
                    pick(("free", "pro", "enterprise"), rng.integers(0, 3, n)),
                    hex_ids(rng, n, 12, "chatcmpl-"),
                    as_text(rng.integers(10, 2000, n)),
                ),
            ),
            (
                pick(("http.response.status_code", "gen_ai.response.finish_reasons", "tool.result.size"), role),
                by_role(
                    role,
                    const("200", n),
                    pick(("stop", "tool_calls", "length"), rng.choice(3, n, p=[0.6, 0.38, 0.02])),
                    as_text(rng.integers(10, 40000, n)),
                ),
            ),
            (
                pick(("agentlat.sdk.version", "agentlat.prompt.prefix_hash", "retry.count"), role),
                by_role(
                    role,
                    const("0.4.2", n),
                    pc.binary_join_element_wise(route_a, as_text(rng.integers(0, 20, n)), "#"),
                    pick(("0", "1"), (rng.random(n) < 0.03).astype(np.int8)),
                ),
            ),
            (
                pick(("client.address", "gen_ai.request.temperature", "cache.hit"), role),
                by_role(
                    role,
                    pc.binary_join_element_wise(
                        "10.0.", as_text(rng.integers(0, 255, n)), as_text(rng.integers(1, 255, n)), "."
                    ),
                    pick(("0.0", "0.2", "0.7"), rng.integers(0, 3, n)),
                    pick(("false", "true"), (rng.random(n) < 0.25).astype(np.int8)),
                ),
            ),
        ],
        n,
    )
    service_a = pick(SERVICES, service)
    resource = string_map(
        [
            (const("service.name", n), service_a),
            (
                const("service.version", n),
                pick(RELEASES, (start >= (last_s - DAY_S) * 10**9).astype(np.int8)),
            ),
            (const("deployment.environment", n), const("production", n)),
            (const("host.name", n), pc.binary_join_element_wise(service_a, as_text(rng.integers(0, 6, n)), "-")),
            (const("telemetry.sdk.language", n), const("python", n)),
            (const("telemetry.sdk.name", n), const("opentelemetry", n)),
            (const("telemetry.sdk.version", n), const("1.27.0", n)),
        ],
        n,
    )
    span_name = by_role(
        role,
        pc.binary_join_element_wise("invoke_agent", agent_a, " "),
        pc.binary_join_element_wise("chat", model_a, " "),
        pc.binary_join_element_wise("execute_tool", tool_a, " "),
    )
    columns = {
        "Timestamp": pa.array(start, TS_NS),
        "TraceId": trace_ids,
        "SpanId": span_id,
        "ParentSpanId": parent,
        "SpanName": span_name,
        "SpanKind": pick(("Server", "Client", "Internal"), role),
        "ServiceName": service_a,
        "ResourceAttributes": resource,
        "ScopeName": pick(("agentlat.sdk", "opentelemetry.instrumentation.openai", "agentlat.sdk"), role),
        "ScopeVersion": pick(("0.4.2", "0.48b0", "0.4.2"), role),
        "SpanAttributes": attrs,
        "Duration": pa.array(duration, pa.uint64()),
        "StatusCode": pick(("Unset", "Error"), error.astype(np.int8)),
        "StatusMessage": pick(("", "upstream timed out after 30s"), error.astype(np.int8)),
        "Role": pick(("agent", "model", "tool"), role),
        "Dialect": const("genai", n),
        "Operation": pick(("invoke_agent", "chat", "execute_tool"), role),
        "Provider": pc.if_else(pa.array(is_model), provider_a, nothing),
        "Model": pc.if_else(pa.array(is_model), model_a, nothing),
        "Tool": pc.if_else(pa.array(is_tool), tool_a, nothing),
        "ToolCallId": pc.if_else(pa.array(is_tool), call_id, nothing),
        "Agent": agent_a,
        "Route": route_a,
        "ConversationId": pc.if_else(pa.array(is_root), conversation, nothing),  # as collected: on the root
        "IsServerSpan": pa.array(np.zeros(n, np.uint8)),
        "Streaming": pa.array(is_model.astype(np.uint8)),
        "TtftMs": masked(ttft, is_model, pa.float64()),
        "DecodeMs": masked(decode, is_model, pa.float64()),
        "ItlMeanMs": masked(itl, is_model, pa.float64()),
        "ItlP50Ms": masked(itl_p50, is_model, pa.float64()),
        "ItlP95Ms": masked(itl_p95, is_model, pa.float64()),
        "ItlMaxMs": masked(itl_max, is_model, pa.float64()),
        "StallCount": masked(stalls, is_model, pa.uint32()),
        "InputTokens": masked(in_tokens, is_model, pa.uint64()),
        "OutputTokens": masked(out_tokens, is_model, pa.uint64()),
        "CacheReadTokens": masked(cache_read, is_model, pa.uint64()),
        "ProjectId": const(PROJECT, n),
    }
    spans = pa.Table.from_arrays(
        [columns[f.name] if f.name in columns else empty_column(f, n) for f in SPAN_ARROW_SCHEMA],
        schema=SPAN_ARROW_SCHEMA,
    )
    # Received 2 s after its trace ends, as an SDK's batching exporter delivers it.
    ingested_ms = np.repeat((start_t + root_ns.astype(np.int64)) // 1_000_000 + 2_000, K)
    spans = spans.append_column("IngestedAt", pa.array(ingested_ms, pa.timestamp("ms", tz="UTC")))

    # One analysed row per trace: sequential children, so the parts add up to the root's duration.
    per_trace = lambda values: values.reshape(T, K)  # noqa: E731
    model_t = np.where(per_trace(is_model), per_trace(duration.astype(np.float64)), 0).sum(axis=1) / 1e6
    tool_t = np.where(per_trace(is_tool), per_trace(duration.astype(np.float64)), 0).sum(axis=1) / 1e6
    e2e = root_ns / 1e6
    decode_t = np.where(per_trace(is_model), per_trace(decode), 0).sum(axis=1)
    in_t = np.where(per_trace(is_model), per_trace(in_tokens.astype(np.float64)), 0).sum(axis=1)
    read_t = np.where(per_trace(is_model), per_trace(cache_read.astype(np.float64)), 0).sum(axis=1)
    errors_t = per_trace(error).sum(axis=1).astype(np.uint32)
    zeros = np.zeros(T)
    child_spans = pc.take(span_id, pa.array((np.arange(T)[:, None] * K + np.arange(1, K)[None, :]).ravel()))
    trace_cols = {
        "ProjectId": const(PROJECT, T),
        "TraceId": trace_id,
        "Start": pa.array(start_t, TS_NS),
        "ServiceName": pick(SERVICES, ROUTE_SERVICE[route_t]),
        "Route": pick(ROUTES, route_t),
        "Agent": pick(AGENTS, route_t),
        "Release": pick(RELEASES, (start_t >= (last_s - DAY_S) * 10**9).astype(np.int8)),  # the root's
        "RootSpanId": pc.take(span_id, pa.array(np.arange(T) * K)),
        "RootName": pc.binary_join_element_wise("invoke_agent", pick(AGENTS, route_t), " "),
        "Partial": pa.array(np.zeros(T, np.uint8)),
        "E2eMs": e2e,
        "ModelMs": model_t,
        "ToolMs": tool_t,
        "OrchestrationMs": e2e - model_t - tool_t,
        "QueueMs": zeros,
        "PrefillMs": zeros,
        "DecodeMs": decode_t,
        "ModelSumMs": model_t,
        "ToolSumMs": tool_t,
        "Parallelism": np.ones(T),
        "ModelCalls": np.full(T, len(MODEL_SLOTS), np.uint32),
        "ToolCalls": np.full(T, len(TOOL_SLOTS), np.uint32),
        "Errors": errors_t,
        "SpanCount": np.full(T, K, np.uint32),
        "FirstTtftMs": per_trace(ttft)[:, MODEL_SLOTS[0]],
        "CacheHitRatio": read_t / in_t,
        "SpecAcceptance": pa.nulls(T, pa.float64()),
        "PrefetchHits": np.zeros(T, np.uint32),
        "PrefetchMisses": np.zeros(T, np.uint32),
        "PrefetchSavedMs": zeros,
        "PrefetchWastedMs": zeros,
        "ServerMs": zeros,
        "ClientWaitMs": zeros,
        "ParallelSavingMs": zeros * slow_t,
        "DispatchSavingMs": zeros,
        "DispatchDelaysMs": pa.ListArray.from_arrays(pa.array(np.zeros(T + 1, np.int32)), pa.array([], pa.float64())),
        "DispatchStreamedCalls": np.zeros(T, np.uint32),
        "SplitComplete": np.ones(T, np.uint8),
        "SeenAgainSpanIds": pa.ListArray.from_arrays(pa.array(np.zeros(T + 1, np.int32)), pa.array([], pa.string())),
        "CriticalPath": pa.ListArray.from_arrays(
            pa.array(np.arange(0, T * (K - 1) + 1, K - 1, dtype=np.int32)), child_spans
        ),
        "Details": const('{"segments": [], "parallelisable": []}', T),
        "AnalysedAt": pa.array(np.full(T, time.time_ns() // 1000, np.int64), pa.timestamp("us", tz="UTC")),
    }
    traces = pa.Table.from_arrays(
        [
            pa.array(trace_cols[f.name], f.type)
            if isinstance(trace_cols[f.name], np.ndarray)
            else trace_cols[f.name].cast(f.type)
            for f in TRACE_ROW_SCHEMA
        ],
        schema=TRACE_ROW_SCHEMA,
    )
    return spans, traces


# --- load --------------------------------------------------------------------------------
def load(data: Path, n_spans: int, seed: int) -> dict[str, object]:
    """Fill a fresh store at ``data``; return timings, sizes and a sample of trace ids."""
    rng = np.random.default_rng(seed)
    now_s = int(time.time())
    last_s = now_s - 120  # traces end before the last minute rolled up
    first_s = last_s - WINDOW_S
    n_traces = n_spans // SPANS_PER_TRACE
    per_batch = BATCH_SPANS // SPANS_PER_TRACE
    store = open_store(data)
    gen_s = insert_s = 0.0
    done = 0
    sample: list[str] = []
    began = time.perf_counter()
    while done < n_traces:
        size = min(per_batch, n_traces - done)
        t0 = time.perf_counter()
        # Chronological batches, as a collector writes them: each covers the next slice of the week.
        slice_first = first_s + (last_s - first_s) * done // n_traces
        slice_last = first_s + (last_s - first_s) * (done + size) // n_traces
        spans, traces = generate(rng, size, slice_first, slice_last)
        t1 = time.perf_counter()
        store.insert_spans(spans)
        store.write_traces(traces)  # after its spans: AnalysedAt later than IngestedAt, nothing to recover
        t2 = time.perf_counter()
        gen_s, insert_s = gen_s + t1 - t0, insert_s + t2 - t1
        sample += traces.column("TraceId").to_pylist()[:20]
        done += size
        total = done * SPANS_PER_TRACE
        print(
            f"  {total:>11,} spans  generate {spans.num_rows / (t1 - t0):>9,.0f} rows/s  "
            f"insert {spans.num_rows / (t2 - t1):>9,.0f} rows/s  overall {total / (t2 - began):>9,.0f} rows/s",
            flush=True,
        )
    t0 = time.perf_counter()
    minutes = list(range(first_s // 60 * 60, last_s // 60 * 60 + 60, 60))
    for i in range(0, len(minutes), ROLLUP_CHUNK_MINUTES):
        store.rollup(minutes[i : i + ROLLUP_CHUNK_MINUTES], version=1)
        print(f"  rolled up {min(i + ROLLUP_CHUNK_MINUTES, len(minutes)):,}/{len(minutes):,} minutes", end="\r")
    rollup_s = time.perf_counter() - t0
    print()
    sizes = table_sizes(store)
    store.close()
    return {
        "spans": n_traces * SPANS_PER_TRACE,
        "traces": n_traces,
        "generate_s": gen_s,
        "insert_s": insert_s,
        "rollup_s": rollup_s,
        "sizes": sizes,
        "sample": sample,
    }


def table_sizes(store) -> dict[str, dict[str, float]]:
    rows = store.backend.query_arrow(
        "SELECT table, count() AS parts, sum(rows) AS rows, sum(bytes_on_disk) AS bytes, "
        "sum(data_uncompressed_bytes) AS raw FROM system.parts "
        "WHERE active AND database = currentDatabase() GROUP BY table ORDER BY bytes DESC"
    ).to_pylist()
    return {r["table"]: r for r in rows}


# --- measure -------------------------------------------------------------------------------
def serve(data: Path) -> tuple[subprocess.Popen, str, Path]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = data.parent / f"{data.name}-server.log"
    agentlat = str(Path(sys.executable).with_name("agentlat"))
    env = {**os.environ, "AGENTLAT_GRPC_PORT": "0", "AGENTLAT_LOG_LEVEL": "warning"}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [agentlat, "serve", "--data", str(data), "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=env
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return proc, url, log_path
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server not ready within 300 s")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pid: int, timeout: float = 180.0) -> float:
    """Wait until the server's start-up work (trace recovery) is done: under 20% of a core for 2 s."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        before = cpu_seconds(pid)
        time.sleep(2)
        if cpu_seconds(pid) - before < 0.4:
            break
    return time.monotonic() - began


def timed_get(client: httpx.Client, path: str) -> float:
    t0 = time.perf_counter()
    r = client.get(path)
    ms = (time.perf_counter() - t0) * 1000
    if r.status_code != 200:
        raise SystemExit(f"GET {path}: {r.status_code} {r.text[:300]}")
    return ms


def measure(client: httpx.Client, paths: Callable[[int], str], reps: int) -> tuple[float, float]:
    timed_get(client, paths(-1))  # warm-up
    times = [timed_get(client, paths(i)) for i in range(reps)]
    return statistics.median(times), max(times)


PANELS: list[tuple[str, str]] = [
    (
        "TTFT p50/p95/p99 by route, 24h, spans (exact)",
        "/api/v1/percentiles?metric=ttft&group_by=route&window=24h&source=spans",
    ),
    (
        "TTFT p50/p95/p99 by route, 24h, rollups",
        "/api/v1/percentiles?metric=ttft&group_by=route&window=24h&source=rollups",
    ),
    ("E2E p50/p95/p99 by route, 7d, rollups", "/api/v1/percentiles?metric=e2e&group_by=route&window=7d&source=rollups"),
    ("breakdown by route, 24h", "/api/v1/breakdown?group_by=route&window=24h"),
    ("timeseries TTFT, 24h, 5m steps", "/api/v1/timeseries?metric=ttft&step=5m&window=24h"),
    ("traces list, slowest, 24h, limit 50", "/api/v1/traces?sort=slowest&window=24h&limit=50"),
    ("advice, 24h", "/api/v1/advice?window=24h"),
    ("dimensions route, 24h (auto: rollups)", "/api/v1/dimensions?dimension=route&window=24h"),
    ("dimensions route, 24h, spans (exact)", "/api/v1/dimensions?dimension=route&window=24h&source=spans"),
    ("dimensions release, 30d (rollups)", "/api/v1/dimensions?dimension=release&window=30d"),
    (
        "compare releases, 24h, spans (exact)",
        f"/api/v1/compare?dimension=release&a={RELEASES[0]}&b={RELEASES[1]}&window=24h",
    ),
    ("compare releases, 30d, rollups", f"/api/v1/compare?dimension=release&a={RELEASES[0]}&b={RELEASES[1]}&window=30d"),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000, help="spans to generate (10 per trace)")
    parser.add_argument("--data", type=Path, default=None, help="fresh store directory (default: a new one in /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument("--reps", type=int, default=10, help="timed repetitions per query, after one warm-up")
    parser.add_argument("--seed", type=int, default=20_260_101)
    parser.add_argument("--pages-rounds", type=int, default=5, help="rounds for bench/dashboard_queries.py (0: skip)")
    parser.add_argument("--browser-rounds", type=int, default=5, help="rounds for bench/dashboard_browser.py (0: skip)")
    args = parser.parse_args(argv)
    data = args.data or Path(tempfile.mkdtemp(prefix="agentlat-query-", dir="/tmp")) / "data"
    if data.exists() and any(data.iterdir()):
        raise SystemExit(f"{data} is not empty: give a fresh directory")
    proc = None
    try:
        print(f"generating {args.spans:,} spans over 7 days into {data}", flush=True)
        began = time.perf_counter()
        loaded = load(data, args.spans, args.seed)
        load_s = time.perf_counter() - began
        print(
            f"loaded {loaded['spans']:,} spans, {loaded['traces']:,} traces in {load_s:.0f} s: generate "
            f"{loaded['generate_s']:.0f} s, insert spans+traces {loaded['insert_s']:.0f} s "
            f"({loaded['spans'] / loaded['insert_s']:,.0f} spans/s), rollups {loaded['rollup_s']:.0f} s",
            flush=True,
        )
        sizes = loaded["sizes"]
        proc, url, _log = serve(data)
        settled = settle(proc.pid)
        print(f"server {url} ready; start-up work settled after {settled:.0f} s", flush=True)
        sample = loaded["sample"]
        results: list[tuple[str, str, str, str]] = []

        def add(figure: str, value: float, target: float, unit: str) -> None:
            verdict = "ok" if value <= target else "OVER"
            results.append((figure, f"{value:,.1f} {unit}", f"<= {target:.0f} {unit}", verdict))

        spans = sizes.get("otel_traces", {})
        per_span = spans["bytes"] / spans["rows"] if spans.get("rows") else float("nan")
        add("bytes per span on disk (otel_traces)", per_span, BYTES_TARGET, "B")
        load_before = os.getloadavg()
        cpu_before = cpu_seconds(proc.pid)
        wall_before = time.perf_counter()
        with httpx.Client(base_url=url, timeout=300) as client:
            for figure, path in PANELS:
                p50, worst = measure(client, lambda _i, p=path: p, args.reps)
                add(f"{figure}: p50", p50, PANEL_TARGET_MS, "ms")
                results.append((f"{figure}: max", f"{worst:,.1f} ms", "", ""))
                print(f"  {figure}: p50 {p50:.1f} ms, max {worst:.1f} ms", flush=True)
            p50, worst = measure(client, lambda i: f"/api/v1/traces/{sample[(i * 7919) % len(sample)]}", args.reps)
            add("trace by id (random traces over 7d): p50", p50, TRACE_TARGET_MS, "ms")
            results.append(("trace by id: max", f"{worst:,.1f} ms", "", ""))
            print(f"  trace by id: p50 {p50:.1f} ms, max {worst:.1f} ms", flush=True)
        server_cpu = cpu_seconds(proc.pid) - cpu_before
        wall = time.perf_counter() - wall_before
        load_after = os.getloadavg()
        pages = ""
        if args.pages_rounds:
            script = Path(__file__).with_name("dashboard_queries.py")
            for window in ("1h", "24h"):
                run = subprocess.run(
                    [sys.executable, str(script), "--api", url, "--window", window, "--rounds", str(args.pages_rounds)],
                    capture_output=True,
                    text=True,
                    cwd=Path(__file__).resolve().parent.parent,
                )
                noise = "No runtime found"  # streamlit's cache outside a streamlit app
                errors = "".join(line for line in run.stderr.splitlines(True) if noise not in line)[-2000:]
                pages += f"\n$ dashboard_queries.py --window {window} (exit {run.returncode})\n{run.stdout}{errors}"
        if args.browser_rounds:
            print("timing the dashboard in a browser ...", flush=True)
            script = Path(__file__).with_name("dashboard_browser.py")
            run = subprocess.run(
                [sys.executable, str(script), "--api", url, "--rounds", str(args.browser_rounds)],
                capture_output=True,
                text=True,
                cwd=Path(__file__).resolve().parent.parent,
            )
            pages += f"\n$ dashboard_browser.py (exit {run.returncode})\n{run.stdout}{run.stderr[-2000:]}"
        print(f"\n{loaded['spans']:,} spans ({loaded['traces']:,} traces) over 7 days; measured right after ingest")
        print(
            f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after the query timings "
            f"(2 cores); server CPU {server_cpu:.1f} s in {wall:.1f} s wall"
        )
        width = max(len(r[0]) for r in results)
        print(f"\n{'figure':<{width}}  {'value':>12}  {'target':>10}  verdict")
        for figure, value, target, verdict in results:
            print(f"{figure:<{width}}  {value:>12}  {target:>10}  {verdict}")
        print("\ntable sizes (active parts):")
        for name, r in sizes.items():
            per_row = r["bytes"] / r["rows"] if r["rows"] else 0
            print(
                f"  {name:<26} {r['parts']:>5} parts {r['rows']:>12,} rows {r['bytes'] / 2**20:>9.1f} MiB on disk "
                f"({per_row:.1f} B/row, {r['raw'] / 2**20:,.0f} MiB uncompressed)"
            )
        print(pages)
        return 1 if any(r[3] == "OVER" for r in results) else 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        if not args.keep:
            shutil.rmtree(data if args.data else data.parent, ignore_errors=True)
            shutil.rmtree(data.with_name(data.name + ".wal"), ignore_errors=True)  # the server's write-ahead log
            data.with_name(f"{data.name}-server.log").unlink(missing_ok=True)
        else:
            print(f"kept {data}")


if __name__ == "__main__":
    sys.exit(main())
