// The live picture of the token's sandboxes: one listing, then the lifecycle event stream
// (`GET /v1/events`); each event refreshes its sandbox. Pages subscribe to changes.

const REFRESH_DELAY_MS = 150;
const MAX_EVENTS = 500;

export class Live {
  constructor(api) {
    this.api = api;
    this.sandboxes = new Map(); // id -> Sandbox
    this.events = []; // newest last, at most MAX_EVENTS
    this.listeners = new Set();
    this.pending = new Set();
    this.timer = null;
    this.abort = new AbortController();
    this.after = null;
  }

  /** Calls `fn(kind, payload)` on `"sandbox"` (a changed or deleted sandbox) and `"event"`. */
  subscribe(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  emit(kind, payload) {
    for (const fn of this.listeners) fn(kind, payload);
  }

  async start() {
    await this.reload();
    // Reconnects (from the last seq seen) until stopped, with a pause between attempts.
    while (!this.abort.signal.aborted) {
      try {
        const query = this.after === null ? {} : { after: this.after };
        for await (const message of this.api.events("/v1/events", query, this.abort.signal)) {
          if (message.event !== "lifecycle") continue;
          const event = JSON.parse(message.data);
          this.after = event.seq;
          this.events.push(event);
          if (this.events.length > MAX_EVENTS) this.events.shift();
          this.emit("event", event);
          if (event.type === "sandbox.deleted") {
            // Nothing to fetch: gone (this also keeps a replay of old events cheap).
            this.sandboxes.delete(event.sandbox_id);
            this.emit("sandbox", { id: event.sandbox_id, state: "deleted" });
          } else if (event.type.startsWith("sandbox.")) {
            this.refreshSoon(event.sandbox_id);
          }
        }
      } catch (err) {
        if (this.abort.signal.aborted) return;
        console.warn("event stream broke", err);
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  }

  stop() {
    this.abort.abort();
  }

  /** Lists every sandbox again (pages of 100). */
  async reload() {
    const seen = new Map();
    let cursor;
    for (let page = 0; page < 50; page++) {
      const list = await this.api.get("/v1/sandboxes", { limit: 100, cursor });
      for (const s of list.sandboxes) seen.set(s.id, s);
      cursor = list.next_cursor;
      if (!cursor) break;
    }
    this.sandboxes = seen;
    this.emit("sandbox", null);
  }

  /** Refetches sandbox `id` shortly (events come in bursts). */
  refreshSoon(id) {
    this.pending.add(id);
    if (this.timer) return;
    this.timer = setTimeout(async () => {
      this.timer = null;
      const ids = [...this.pending];
      this.pending.clear();
      for (const id of ids) await this.refresh(id);
    }, REFRESH_DELAY_MS);
  }

  async refresh(id) {
    try {
      const sandbox = await this.api.get(`/v1/sandboxes/${encodeURIComponent(id)}`);
      this.sandboxes.set(id, sandbox);
      this.emit("sandbox", sandbox);
    } catch (err) {
      if (err.status === 404) {
        this.sandboxes.delete(id);
        this.emit("sandbox", { id, state: "deleted" });
      } else {
        console.warn("refresh failed", id, err);
      }
    }
  }
}
