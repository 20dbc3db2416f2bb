/**
 * A response body as text, refusing bodies over `maxBytes` without buffering them whole: a declared
 * `Content-Length` over the limit is refused before reading, a stream is cut off once past it.
 * Throws what `tooLarge()` returns in either case.
 */
export async function readBoundedText(
  response: Response,
  maxBytes: number,
  tooLarge: () => Error,
): Promise<string> {
  if (Number(response.headers.get("content-length") ?? "0") > maxBytes) {
    await response.body?.cancel();
    throw tooLarge();
  }
  if (response.body === null) return "";
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel();
      throw tooLarge();
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString("utf8");
}
