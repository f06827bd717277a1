// The metadata log as Server-Sent Events, read with fetch() so that a bearer token can be sent
// (EventSource cannot send headers). Reconnects on its own and resumes after the last offset seen.

import { authHeaders, problemOf } from "./api.js";

const RETRY_MS_DEFAULT = 1000; // until the server says otherwise ("retry:" field)
const RETRY_MS_MAX = 10_000; // back-off ceiling while the node stays unreachable
// The records the dashboard shows (any type, by name and data): those of metadata version 4, range records included.
const READS_METADATA_VERSION = 4;

/**
 * Incremental parser of the text/event-stream format (the WHATWG "event stream interpretation"):
 * feed it decoded text in any chunking, it calls `onEvent({event, data, id})` per complete event and
 * `onRetry(ms)` when the server sets a reconnection delay. Comments (":" lines) are keep-alives.
 */
export class SSEParser {
  constructor(onEvent, onRetry = () => {}) {
    this.onEvent = onEvent;
    this.onRetry = onRetry;
    this.buffer = "";
    this.reset();
  }

  reset() {
    this.event = "";
    this.data = [];
    this.id = null;
  }

  push(text) {
    this.buffer += text;
    let end;
    // A line ends at \n, \r\n or a lone \r; a \r at the very end may still be followed by \n.
    while ((end = this.buffer.search(/\r\n|\n|\r(?!$)/)) !== -1) {
      const line = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + (this.buffer.startsWith("\r\n", end) ? 2 : 1));
      this.line(line);
    }
  }

  line(line) {
    if (line === "") {
      if (this.data.length) this.onEvent({ event: this.event || "message", data: this.data.join("\n"), id: this.id });
      this.reset();
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id" && !value.includes("\0")) this.id = value;
    else if (field === "retry" && /^\d+$/.test(value)) this.onRetry(Number(value));
  }
}

/**
 * Follows GET /v1/log/stream from an offset: `onRecord({offset, type, data})` per record, in order,
 * each exactly once across reconnects. `onGone(problem)` when the wanted offset is below the node's
 * retention window (the stream then stops: the caller decides where to continue).
 * `onStatus(status, detail)`: "connecting" | "live" | "reconnecting" | "unauthorized" | "stopped".
 */
export class LogStream {
  constructor({ onRecord, onGone, onStatus }) {
    this.onRecord = onRecord;
    this.onGone = onGone;
    this.onStatus = onStatus;
    this.controller = null;
    this.nextOffset = 0;
  }

  get running() {
    return this.controller !== null;
  }

  start(offset) {
    this.stop();
    this.nextOffset = offset;
    const controller = new AbortController();
    this.controller = controller;
    this.run(controller.signal);
  }

  stop() {
    if (this.controller) {
      this.controller.abort();
      this.controller = null;
      this.onStatus("stopped");
    }
  }

  async run(signal) {
    let retryMs = RETRY_MS_DEFAULT;
    let failures = 0;
    this.onStatus("connecting");
    while (!signal.aborted) {
      // After a failure the status it set ("reconnecting", "unauthorized") stands until an answer.
      try {
        const response = await fetch(`/v1/log/stream?offset=${this.nextOffset}&metadata_version=${READS_METADATA_VERSION}`, {
          headers: { Accept: "text/event-stream", ...authHeaders() },
          signal,
          cache: "no-store",
        });
        if (response.status === 410) {
          this.finish(signal);
          this.onGone(await problemOf(response));
          return;
        }
        if (!response.ok) {
          const problem = await problemOf(response);
          const auth = response.status === 401 || response.status === 403;
          this.onStatus(auth ? "unauthorized" : "reconnecting", problem.detail || problem.title);
          failures += 1;
        } else {
          this.onStatus("live");
          failures = 0;
          const gone = await this.consume(response.body, signal, (ms) => (retryMs = ms));
          if (gone) {
            this.finish(signal);
            this.onGone(gone);
            return;
          }
          this.onStatus("reconnecting", "the stream ended");
        }
      } catch (error) {
        if (signal.aborted) return;
        failures += 1;
        this.onStatus("reconnecting", String(error.message || error));
      }
      const backoff = Math.min(RETRY_MS_MAX, retryMs * 2 ** Math.max(0, failures - 1));
      await sleep(backoff, signal);
    }
  }

  /** Reads one response body; returns the `gone` problem if the server sent one, else null. */
  async consume(body, signal, onRetry) {
    let gone = null;
    const parser = new SSEParser((event) => {
      if (event.event === "record") {
        const record = JSON.parse(event.data);
        if (record.offset < this.nextOffset) return; // already delivered before a reconnect
        this.nextOffset = record.offset + 1;
        this.onRecord(record);
      } else if (event.event === "gone") {
        gone = JSON.parse(event.data);
      }
    }, onRetry);
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      while (!gone) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.push(value);
      }
    } finally {
      if (!signal.aborted) reader.cancel().catch(() => {});
    }
    return gone;
  }

  finish(signal) {
    if (this.controller && this.controller.signal === signal) this.controller = null;
  }
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
  });
}
