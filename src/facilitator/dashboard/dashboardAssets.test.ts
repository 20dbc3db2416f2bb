import { brotliDecompressSync, gunzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { dashboardAssetResponse, loadDashboardAssets } from "./dashboardAssets.ts";

const asset = loadDashboardAssets().get("dashboard.js")!;

async function bytes(res: Response): Promise<Buffer> {
  return Buffer.from(await res.arrayBuffer());
}

describe("dashboardAssetResponse", () => {
  it("sends brotli when the browser accepts it, gzip when only that, the plain text otherwise", async () => {
    const br = dashboardAssetResponse(asset, "gzip, deflate, br, zstd");
    expect(br.headers.get("content-encoding")).toBe("br");
    expect(brotliDecompressSync(await bytes(br)).toString("utf8")).toBe(asset.body);
    const gzip = dashboardAssetResponse(asset, "gzip");
    expect(gzip.headers.get("content-encoding")).toBe("gzip");
    expect(gunzipSync(await bytes(gzip)).toString("utf8")).toBe(asset.body);
    const plain = dashboardAssetResponse(asset, undefined);
    expect(plain.headers.get("content-encoding")).toBeNull();
    expect(await plain.text()).toBe(asset.body);
  });

  it("honours q=0 as a refusal and keeps the content type, caching and Vary on every answer", async () => {
    expect(dashboardAssetResponse(asset, "br;q=0, gzip;q=0.5").headers.get("content-encoding")).toBe("gzip");
    expect(dashboardAssetResponse(asset, "br;q=0, gzip;q=0").headers.get("content-encoding")).toBeNull();
    for (const accept of ["br", "gzip", undefined]) {
      const res = dashboardAssetResponse(asset, accept);
      expect(res.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
      expect(res.headers.get("cache-control")).toBe("public, max-age=300");
      expect(res.headers.get("vary")).toBe("accept-encoding");
    }
  });

  it("compresses the scripts to well under half their size", () => {
    expect(asset.gzip.length).toBeLessThan(asset.body.length / 2);
    expect(asset.br.length).toBeLessThan(asset.gzip.length);
  });
});
