import { ChatOpenAI } from "@langchain/openai";
import { describe, expect, it } from "vitest";
import { isTollgateError } from "../../protocol/errors.ts";
import { DEFAULT_OPENAI_MODEL, modelFromEnv } from "./modelFromEnv.ts";

describe("modelFromEnv", () => {
  it("uses the rule planner without OPENAI_API_KEY, or with an empty one", () => {
    expect(modelFromEnv({})).toBe("rules");
    expect(modelFromEnv({ OPENAI_API_KEY: "", OPENAI_BASE_URL: "" })).toBe("rules");
  });

  it("builds ChatOpenAI with the key, the default model and the base URL", () => {
    const model = modelFromEnv({ OPENAI_API_KEY: "sk-test", OPENAI_BASE_URL: "http://127.0.0.1:11434/v1" });
    expect(model).toBeInstanceOf(ChatOpenAI);
    const chat = model as ChatOpenAI;
    expect(chat.model).toBe(DEFAULT_OPENAI_MODEL);
    expect(chat.apiKey).toBe("sk-test");
    expect(chat.clientConfig.baseURL).toBe("http://127.0.0.1:11434/v1");
    expect(chat.streaming).toBe(false);
    const streaming = modelFromEnv({ OPENAI_API_KEY: "sk-test" }, { streaming: true }) as ChatOpenAI;
    expect(streaming.streaming).toBe(true);
  });

  it("lets TOLLGATE_PLANNER force the rules, and refuses 'model' without a key", () => {
    expect(modelFromEnv({ OPENAI_API_KEY: "sk-test", TOLLGATE_PLANNER: "rules" })).toBe("rules");
    const failure = (() => {
      try {
        modelFromEnv({ TOLLGATE_PLANNER: "model" });
      } catch (error) {
        return error;
      }
    })();
    expect(isTollgateError(failure, "InvalidRequest")).toBe(true);
  });

  it("refuses a base URL that is not http(s)", () => {
    expect(() => modelFromEnv({ OPENAI_API_KEY: "k", OPENAI_BASE_URL: "file:///etc" })).toThrow(
      /model environment/,
    );
  });
});
