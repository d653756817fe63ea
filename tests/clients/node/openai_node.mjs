// The official `openai` Node SDK (what Roo Code uses) against the gateway.
// Usage: GATEWAY_URL=… GATEWAY_KEY=… MODEL=… [OPENAI_PACKAGE=openai-v5] node openai_node.mjs <scenario>
// OPENAI_PACKAGE picks the SDK: `openai` (the newest major that runs on Node 20) or `openai-v5` (the major Roo
// Code ships).
import { BASE_URL, GATEWAY_KEY, MODEL, READ_FILE, main, readFile } from "./common.mjs";

const PACKAGE = process.env.OPENAI_PACKAGE || "openai";
const { default: OpenAI } = await import(PACKAGE);
const { VERSION: SDK_VERSION } = await import(`${PACKAGE}/version`);

const client = new OpenAI({ baseURL: BASE_URL, apiKey: GATEWAY_KEY, maxRetries: 0, timeout: 20_000 });
const TOOLS = [{ type: "function", function: READ_FILE }];
const ASK = 'CALL:read_file {"path": "src/app.py"}';

await main({
  // A streamed text turn read chunk by chunk, as Roo Code reads it (plus GET /models, whose data[].id Roo lists).
  async "stream-text"() {
    const models = [];
    for await (const model of client.models.list()) models.push(model.id);
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [
        { role: "system", content: "You are a helpful assistant." },
        { role: "user", content: "THINK:Weighing a greeting SAY:Hello from the Node SDK" },
      ],
      stream: true,
      stream_options: { include_usage: true },
    });
    let content = "";
    let reasoning = "";
    let finish = null;
    let usage = null;
    let role = null;
    let contentDeltas = 0;
    let deltasWithoutContent = 0;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices) {
        const delta = choice.delta;
        if (!("content" in delta)) deltasWithoutContent += 1;
        role = role ?? delta.role ?? null;
        if (delta.content) contentDeltas += 1;
        content += delta.content ?? "";
        reasoning += delta.reasoning_content ?? "";
        finish = choice.finish_reason ?? finish;
      }
    }
    return { sdkVersion: SDK_VERSION, models, content, reasoning, finish, usage, role, contentDeltas, deltasWithoutContent };
  },

  // The SDK's streaming helper assembles the tool call from the deltas (its `tool_calls.function.arguments.done`
  // event and finalChatCompletion()); the script runs the tool and streams the results back.
  async "tool-stream"() {
    const messages = [{ role: "user", content: ASK }];
    const first = client.chat.completions.stream({
      model: MODEL,
      messages,
      tools: TOOLS,
      tool_choice: "auto",
      stream_options: { include_usage: true },
    });
    const argumentEvents = [];
    first.on("tool_calls.function.arguments.done", (event) =>
      argumentEvents.push({ name: event.name, index: event.index, arguments: event.arguments }),
    );
    const firstCompletion = await first.finalChatCompletion();
    const paused = firstCompletion.choices[0];
    const calls = paused.message.tool_calls ?? [];
    // Send the assistant message back exactly as the SDK assembled it (extra SDK fields included).
    messages.push(paused.message);
    for (const call of calls) {
      messages.push({ role: "tool", tool_call_id: call.id, content: readFile(JSON.parse(call.function.arguments)) });
    }
    const second = client.chat.completions.stream({
      model: MODEL,
      messages,
      tools: TOOLS,
      stream_options: { include_usage: true },
    });
    const secondCompletion = await second.finalChatCompletion();
    return {
      firstFinish: paused.finish_reason,
      toolCalls: calls.map((c) => ({ id: c.id, type: c.type, name: c.function.name, arguments: c.function.arguments })),
      argumentEvents,
      firstUsage: firstCompletion.usage ?? null,
      sentAssistantKeys: Object.keys(paused.message).sort(),
      finalFinish: secondCompletion.choices[0].finish_reason,
      finalContent: secondCompletion.choices[0].message.content,
      finalUsage: secondCompletion.usage ?? null,
    };
  },

  // The SDK's own tool loop: runTools() calls the tool function and sends its result until the agent answers.
  async "run-tools"() {
    return runTools(false);
  },
  async "run-tools-stream"() {
    return runTools(true);
  },

  // How the SDK surfaces the gateway's errors: an HTTP error envelope (unknown model), then an error event in the
  // middle of a stream (the test breaks Letta's next stream before running this).
  async errors() {
    const out = {};
    try {
      await client.chat.completions.create({ model: "no-such-agent", messages: [{ role: "user", content: "hi" }] });
      out.http = { thrown: false };
    } catch (error) {
      out.http = { thrown: true, class: error.constructor.name, status: error.status, code: error.code, type: error.type, param: error.param, message: error.message };
    }
    let content = "";
    try {
      const stream = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: "user", content: "SAY:cut short" }],
        stream: true,
      });
      for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? "";
      out.stream = { thrown: false, content };
    } catch (error) {
      out.stream = { thrown: true, class: error.constructor.name, status: error.status ?? null, code: error.code ?? null, type: error.type ?? null, message: error.message, content };
    }
    return out;
  },
});

async function runTools(stream) {
  const seen = [];
  const runner = client.chat.completions.runTools({
    model: MODEL,
    messages: [{ role: "user", content: ASK }],
    stream,
    tools: [
      {
        type: "function",
        function: {
          ...READ_FILE,
          parse: JSON.parse,
          function: (args) => {
            seen.push(args);
            return readFile(args);
          },
        },
      },
    ],
  });
  const finalContent = await runner.finalContent();
  return {
    finalContent,
    toolArgs: seen,
    roles: runner.messages.map((m) => m.role),
    requests: runner.allChatCompletions().length,
    finishReasons: runner.allChatCompletions().map((c) => c.choices[0].finish_reason),
  };
}
