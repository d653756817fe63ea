// Shared by the client scripts: configuration from the environment, the one tool they offer, and the JSON line
// each script prints for tests/clients/test_*.py to assert on.

export const GATEWAY_URL = required("GATEWAY_URL"); // the gateway's root, e.g. http://127.0.0.1:8000 (no /v1)
export const GATEWAY_KEY = required("GATEWAY_KEY");
export const MODEL = required("MODEL");
export const BASE_URL = `${GATEWAY_URL.replace(/\/+$/, "")}/v1`;

function required(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`${name} is not set`);
    process.exit(2);
  }
  return value;
}

// The tool every scenario offers (OpenAI function-tool parameters, plain JSON schema).
export const READ_FILE = {
  name: "read_file",
  description: "Read a file of the workspace and return its contents.",
  parameters: {
    type: "object",
    properties: { path: { type: "string", description: "Path relative to the workspace root" } },
    required: ["path"],
    additionalProperties: false,
  },
};

// What the client's tool returns; the agent's final answer must quote it.
export function readFile({ path }) {
  return `FILE<${path}>:42 lines`;
}

// Runs one scenario chosen by argv[2] and prints exactly one JSON line: {ok: true, scenario, ...result}, or
// {ok: false, scenario, error, name, stack, cause} with exit code 1 (the test shows it as the failure message).
export async function main(scenarios) {
  const name = process.argv[2];
  const scenario = scenarios[name];
  if (!scenario) {
    console.log(JSON.stringify({ ok: false, scenario: name, error: `unknown scenario; one of ${Object.keys(scenarios)}` }));
    process.exit(2);
  }
  try {
    const result = await scenario();
    console.log(JSON.stringify({ ok: true, scenario: name, ...result }));
  } catch (error) {
    console.log(JSON.stringify({ ok: false, scenario: name, ...describe(error) }));
    process.exitCode = 1;
  }
}

function describe(error) {
  if (!(error instanceof Error)) return { error: String(error) };
  const out = { error: error.message, name: error.name, stack: error.stack };
  for (const key of ["status", "responseBody", "url", "data", "value"]) {
    if (error[key] !== undefined) out[key] = safe(error[key]);
  }
  if (error.cause !== undefined) out.cause = error.cause instanceof Error ? describe(error.cause) : safe(error.cause);
  return out;
}

function safe(value) {
  try {
    return JSON.parse(JSON.stringify(value));
  } catch {
    return String(value);
  }
}
