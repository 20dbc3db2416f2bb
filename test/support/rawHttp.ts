/**
 * HTTP/1.1 requests written byte for byte on a TCP socket, for tests that send what `fetch` would
 * never send: a forged `Host`, an absolute-form target, dot segments kept as they are.
 */
import { connect } from "node:net";

export type RawResponse = { status: number; headers: Record<string, string>; body: string };

/**
 * Sends `METHOD target HTTP/1.1` with the given headers (a `Host` among them, as given) and
 * `Connection: close`, and reads the whole response.
 */
export function rawRequest(
  port: number,
  request: { method?: string; target: string; host: string; headers?: Record<string, string> },
): Promise<RawResponse> {
  const lines = [
    `${request.method ?? "GET"} ${request.target} HTTP/1.1`,
    `Host: ${request.host}`,
    ...Object.entries(request.headers ?? {}).map(([name, value]) => `${name}: ${value}`),
    "Connection: close",
    "",
    "",
  ];
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    socket.on("data", (chunk) => chunks.push(chunk));
    socket.on("error", reject);
    socket.on("end", () => {
      try {
        resolve(parseResponse(Buffer.concat(chunks).toString("latin1")));
      } catch (error) {
        reject(error);
      }
    });
    socket.write(lines.join("\r\n"), "latin1");
  });
}

function parseResponse(text: string): RawResponse {
  const headEnd = text.indexOf("\r\n\r\n");
  if (headEnd === -1) throw new Error(`no complete response head: ${JSON.stringify(text.slice(0, 200))}`);
  const [statusLine, ...headerLines] = text.slice(0, headEnd).split("\r\n");
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine ?? "")?.[1]);
  const headers: Record<string, string> = {};
  for (const line of headerLines) {
    const colon = line.indexOf(":");
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  let body = text.slice(headEnd + 4);
  if (headers["transfer-encoding"]?.toLowerCase() === "chunked") body = dechunk(body);
  return { status, headers, body: Buffer.from(body, "latin1").toString("utf8") };
}

function dechunk(text: string): string {
  let out = "";
  let at = 0;
  for (;;) {
    const lineEnd = text.indexOf("\r\n", at);
    if (lineEnd === -1) return out;
    const size = Number.parseInt(text.slice(at, lineEnd), 16);
    if (!(size > 0)) return out;
    out += text.slice(lineEnd + 2, lineEnd + 2 + size);
    at = lineEnd + 2 + size + 2;
  }
}
