// Vercel AI SDK 6 (Node): an agent loop of streamText (stream) or generateText (whole) on an OpenAI-compatible
// provider with a tool, recorded by the SDK's own telemetry (experimental_telemetry) into an OpenTelemetry
// NodeTracerProvider that exports OTLP/HTTP to the collector. The case_kit.py protocol, in JavaScript: the same
// arguments, the tool timed by its own wall clock, a warm-up run then the measured one, the same answer file.
// Its npm packages are tests/conformance/node/package-lock.json's (built by envs.node_modules()).

import { parseArgs } from "node:util";
import { writeFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { trace } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

// as in case_kit.py and cases/agent_loops.py
const OPENAI_MODEL = "gpt-fake-1";
const TOOL = "get_weather";
const TOOL_MS = 200;
const PROMPT = "What is the weather in Paris? Use the get_weather tool.";
const TOOL_DESCRIPTION = "The current weather in a city.";
const AGENT = "weather_agent";

const { values: args } = parseArgs({
  options: {
    collector: { type: "string" },
    llm: { type: "string" },
    stream: { type: "string" },
    out: { type: "string" },
    provider: { type: "string", default: "openai" },
  },
  strict: true,
});
for (const name of ["collector", "llm", "stream", "out"]) {
  if (args[name] === undefined) throw new Error(`--${name} is required`);
}
if (!["0", "1"].includes(args.stream)) throw new Error(`--stream 0|1, not ${args.stream}`);
if (args.provider !== "openai") throw new Error(`provider ${args.provider}: this case drives openai only`);
const streamed = args.stream === "1";

/** Wall-clock ns, as Python's time.time_ns() (and OpenTelemetry JS's span times): a BigInt, exact. */
function timeNs() {
  return BigInt(Math.round(performance.timeOrigin * 1e3)) * 1000n + BigInt(Math.round(performance.now() * 1e6));
}

const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ "service.name": "conformance-vercel" }),
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: `${args.collector}/v1/traces` }))],
});
provider.register();

const answer = { tool_calls: [], trace_ids: [], model_trace_ids: [], measured_from_ns: 0n };

function noteTrace() {
  const context = trace.getActiveSpan()?.spanContext();
  if (answer.measured_from_ns && context) answer.trace_ids.push(context.traceId);
}

const getWeather = tool({
  description: TOOL_DESCRIPTION,
  inputSchema: z.object({ query: z.string().describe("the city") }),
  // the ground truth of tool time: sleeps TOOL_MS, timed by its own clock
  execute: async ({ query }) => {
    const start = timeNs();
    noteTrace();
    await sleep(TOOL_MS);
    if (answer.measured_from_ns) {
      answer.tool_calls.push({ name: TOOL, query, start_ns: start, end_ns: timeNs() });
    }
    return `Sunny and 21 C in ${query}.`;
  },
});

// includeUsage: tokens on streams too (stream_options.include_usage)
const openai = createOpenAICompatible({ name: "fake", baseURL: `${args.llm}/v1`, apiKey: "fake", includeUsage: true });

async function agent() {
  const call = {
    model: openai(OPENAI_MODEL),
    prompt: PROMPT,
    tools: { [TOOL]: getWeather },
    stopWhen: stepCountIs(5),
    experimental_telemetry: { isEnabled: true, functionId: AGENT },
  };
  if (!streamed) {
    await generateText(call);
    return;
  }
  // the stream as it arrives; an error is a part of it, not thrown (streamText's onError only logs it)
  for await (const part of streamText(call).fullStream) {
    if (part.type === "error" || part.type === "tool-error") throw part.error;
  }
}

await agent(); // warm-up
answer.measured_from_ns = timeNs();
await agent();
await provider.forceFlush();
await provider.shutdown();
writeFileSync(args.out, JSON.stringify(answer, (_, v) => (typeof v === "bigint" ? JSON.rawJSON(v.toString()) : v)));
