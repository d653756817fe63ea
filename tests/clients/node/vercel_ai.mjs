// The Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`, what Cline uses for OpenAI-compatible servers) against the
// gateway. Usage: GATEWAY_URL=… GATEWAY_KEY=… MODEL=… node vercel_ai.mjs <scenario>
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";

import { BASE_URL, GATEWAY_KEY, MODEL, READ_FILE, main, readFile } from "./common.mjs";

const provider = createOpenAICompatible({
  name: "letta-gateway",
  baseURL: BASE_URL,
  apiKey: GATEWAY_KEY,
  includeUsage: true, // stream_options.include_usage, as Cline sets it
});
const model = provider.chatModel(MODEL);
const ASK = 'CALL:read_file {"path": "src/app.py"}';

// Tools the way Cline declares them: a JSON schema, no zod; no `execute`, the client runs them itself.
const clientTools = {
  read_file: tool({ description: READ_FILE.description, inputSchema: jsonSchema(READ_FILE.parameters) }),
};

// Drains a streamText result the way Cline does (fullStream parts); SDK-reported errors fail the scenario.
async function drain(result) {
  const parts = {};
  const errors = [];
  const toolCalls = [];
  let text = "";
  let reasoning = "";
  for await (const part of result.fullStream) {
    parts[part.type] = (parts[part.type] ?? 0) + 1;
    if (part.type === "text-delta") text += part.text;
    else if (part.type === "reasoning-delta") reasoning += part.text;
    else if (part.type === "tool-call") toolCalls.push({ id: part.toolCallId, name: part.toolName, input: part.input });
    else if (part.type === "error") errors.push(part.error);
  }
  if (errors.length) {
    const error = errors[0] instanceof Error ? errors[0] : new Error(JSON.stringify(errors[0]));
    error.message = `streamText reported ${errors.length} error part(s): ${error.message}`;
    throw error;
  }
  const request = await result.request;
  return {
    text,
    reasoning,
    toolCalls,
    parts,
    finishReason: await result.finishReason,
    rawFinishReason: (await result.steps).at(-1)?.rawFinishReason ?? null,
    usage: await result.usage,
    warnings: (await result.warnings) ?? [],
    requestBody: typeof request.body === "string" ? JSON.parse(request.body) : request.body,
  };
}

function summary(body) {
  // The parts of the request the tests check (what Cline sends), without the whole transcript.
  return {
    stream: body.stream,
    stream_options: body.stream_options,
    tools: (body.tools ?? []).map((t) => t.function.name),
    roles: (body.messages ?? []).map((m) => m.role),
  };
}

function describeError(error) {
  return {
    class: error?.constructor?.name,
    name: error?.name,
    message: error?.message,
    statusCode: error?.statusCode ?? null,
    isRetryable: error?.isRetryable ?? null,
    data: error?.data ?? null,
  };
}

await main({
  // A streamed text turn with reasoning: textStream, reasoningText, usage from the include_usage chunk.
  async "stream-text"() {
    const result = streamText({
      model,
      system: "You are a helpful assistant.",
      prompt: "THINK:Weighing a greeting SAY:Hello from the Vercel AI SDK",
      maxRetries: 0,
    });
    const out = await drain(result);
    return {
      ...out,
      reasoningText: (await result.reasoningText) ?? null,
      finalText: await result.text,
      requestBody: summary(out.requestBody),
    };
  },

  // Cline's loop: stream, collect the tool-call parts, run the tool, send the tool result, stream the answer.
  async "tool-stream"() {
    const messages = [{ role: "user", content: ASK }];
    const first = streamText({ model, messages, tools: clientTools, maxRetries: 0 });
    const paused = await drain(first);
    const response = await first.response;
    messages.push(...response.messages);
    messages.push({
      role: "tool",
      content: paused.toolCalls.map((call) => ({
        type: "tool-result",
        toolCallId: call.id,
        toolName: call.name,
        output: { type: "text", value: readFile(call.input) },
      })),
    });
    const second = streamText({ model, messages, tools: clientTools, maxRetries: 0 });
    const answer = await drain(second);
    return {
      first: { ...paused, requestBody: summary(paused.requestBody) },
      second: { ...answer, requestBody: summary(answer.requestBody) },
      resumeMessages: answer.requestBody.messages,
    };
  },

  // How the SDK surfaces the gateway's errors: an HTTP error envelope (unknown model), then an error event in the
  // middle of a stream (the test breaks Letta's next stream before running this).
  async errors() {
    const out = {};
    try {
      await generateText({ model: provider.chatModel("no-such-agent"), prompt: "hi", maxRetries: 0 });
      out.http = { thrown: false };
    } catch (error) {
      out.http = { thrown: true, ...describeError(error) };
    }
    const result = streamText({ model, prompt: "SAY:cut short", maxRetries: 0, onError: () => {} });
    const errors = [];
    let text = "";
    for await (const part of result.fullStream) {
      if (part.type === "error") errors.push(describeError(part.error));
      if (part.type === "text-delta") text += part.text;
    }
    out.stream = { errors, text, finishReason: await result.finishReason.catch((e) => `threw: ${e.message}`) };
    return out;
  },

  // The SDK's own tool loop: generateText with an `execute` tool, two steps (tool call, then the answer).
  async "generate-tools"() {
    const seen = [];
    const result = await generateText({
      model,
      prompt: `THINK:I need the file first ${ASK}`,
      maxRetries: 0,
      stopWhen: stepCountIs(3),
      tools: {
        read_file: tool({
          description: READ_FILE.description,
          inputSchema: jsonSchema(READ_FILE.parameters),
          execute: async (input) => {
            seen.push(input);
            return readFile(input);
          },
        }),
      },
    });
    const resumeBody = result.steps[1]?.request?.body;
    const resumeMessages = (typeof resumeBody === "string" ? JSON.parse(resumeBody) : resumeBody)?.messages ?? [];
    return {
      text: result.text,
      toolArgs: seen,
      resumeMessages,
      steps: result.steps.map((s) => ({
        finishReason: s.finishReason,
        toolCalls: s.toolCalls.map((c) => ({ id: c.toolCallId, name: c.toolName, input: c.input })),
        text: s.text,
        reasoningText: s.reasoningText ?? null,
      })),
      totalUsage: result.totalUsage,
    };
  },
});
