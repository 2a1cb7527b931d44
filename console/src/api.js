// The console's only way to the server: the public REST API (same origin), with the token the
// user signed in with. Errors are the API's `{code, message, request_id}` bodies.

/** An error answer of the API. */
export class ApiError extends Error {
  constructor(status, body) {
    super(`${body.code}: ${body.message}`);
    this.status = status;
    this.code = body.code;
    this.requestId = body.request_id || "";
  }
}

/** A client of the management API with one bearer token. */
export class Api {
  constructor(token) {
    this.token = token;
  }

  /** Sends a request; answers the parsed JSON (or the raw Response with `raw`). */
  async request(method, path, { json, body, query, raw, signal } = {}) {
    const url = new URL(path, location.origin);
    for (const [k, v] of Object.entries(query || {})) {
      if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
    }
    const headers = { Authorization: `Bearer ${this.token}` };
    if (json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(json);
    }
    const response = await fetch(url, { method, headers, body, signal });
    if (!response.ok) {
      let error;
      try {
        error = await response.json();
      } catch {
        error = { code: `http_${response.status}`, message: response.statusText };
      }
      throw new ApiError(response.status, error);
    }
    if (raw) return response;
    const text = await response.text();
    return text ? JSON.parse(text) : null;
  }

  get(path, query) {
    return this.request("GET", path, { query });
  }

  post(path, json) {
    return this.request("POST", path, { json: json || {} });
  }

  /**
   * Server-sent events of `path` as an async iterator of `{event, data, id}`; ends when the
   * server closes the stream or `signal` aborts.
   */
  async *events(path, query, signal) {
    const response = await this.request("GET", path, { query, raw: true, signal });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let event = { event: "message", data: "", id: null };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let newline;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline).replace(/\r$/, "");
        buffer = buffer.slice(newline + 1);
        if (line === "") {
          if (event.data !== "") yield event;
          event = { event: "message", data: "", id: null };
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "data") event.data += (event.data ? "\n" : "") + text;
          else if (field === "event") event.event = text;
          else if (field === "id") event.id = text;
        }
      }
    }
  }
}

/** Bytes of a base64 string. */
export function fromBase64(b64) {
  const bin = atob(b64 || "");
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return bytes;
}

/** UTF-8 text of a base64 string (invalid sequences become U+FFFD). */
export function textOfBase64(b64) {
  return new TextDecoder().decode(fromBase64(b64));
}
