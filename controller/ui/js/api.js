// The public HTTP API of the node serving this page, and the bearer token the operator typed in.
//
// Every request goes to this page's own origin (no CORS). Errors arrive as problem+json (RFC 9457);
// they become an ApiError whose message is the problem's `detail`, so the page can show it as is.

const TOKEN_KEY = "kfed.token";

/** The admin (or read) token, kept in sessionStorage: it lives as long as this tab, never on disk. */
export const token = {
  get() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  },
  set(value) {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  },
};

/** Headers every request carries: the bearer token when one is set. */
export function authHeaders() {
  const t = token.get();
  return t ? { Authorization: `Bearer ${t}` } : {};
}

export class ApiError extends Error {
  /** @param {number} status @param {object} problem the problem+json body (or a stand-in) */
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.problem = problem;
  }
}

/** The problem+json body of a failed response, or a stand-in built from its status line. */
export async function problemOf(response) {
  const text = await response.text().catch(() => "");
  try {
    const body = JSON.parse(text);
    if (body && typeof body === "object") return body;
  } catch {
    // not JSON: a proxy's HTML page or an empty body
  }
  return { title: response.statusText || "Error", status: response.status, detail: text.slice(0, 300) || undefined };
}

/** A key that makes a retried write apply at most once (works outside secure contexts too). */
function idempotencyKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return "ui-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * JSON request to this node. Writes (`body` given or method not GET) carry an Idempotency-Key.
 * @returns {Promise<any>} the decoded JSON body
 * @throws {ApiError} on a non-2xx answer; a TypeError when the node cannot be reached
 */
export async function request(path, { method = "GET", body, signal } = {}) {
  const headers = { Accept: "application/json", ...authHeaders() };
  if (method !== "GET") headers["Idempotency-Key"] = idempotencyKey();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    cache: "no-store",
  });
  if (!response.ok) throw new ApiError(response.status, await problemOf(response));
  return response.json();
}

/** A query string of the parameters that are set. */
function query(params) {
  return new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined)).toString();
}

// -- the routes this page uses ---------------------------------------------------------------------
export const api = {
  node: () => request("/v1/node"),
  quorum: () => request("/v1/quorum"),
  /** A page of topics by name from `first`, each with its first `partitionLimit` partitions. */
  metadata: (minOffset, { first = "", topicLimit, partitionLimit }) =>
    request(`/v1/metadata?${query({ min_offset: minOffset >= 0 ? minOffset : undefined, first_topic: first,
      topic_limit: topicLimit, partition_limit: partitionLimit })}`),
  /** One topic's page of partitions from `first` (the metadata of one topic). */
  topicPage: (minOffset, topic, first, partitionLimit) =>
    request(`/v1/metadata?${query({ min_offset: minOffset >= 0 ? minOffset : undefined, topic,
      first_partition: first, partition_limit: partitionLimit })}`),
  agents: () => request("/v1/agents"),
  drain: () => request("/v1/drain"),
  gateways: () => request("/v1/gateways"),
  setPartitionState: (topic, partition, state) =>
    request(`/v1/topics/${encodeURIComponent(topic)}/partitions/${partition}/state`, {
      method: "PUT",
      body: { state },
    }),
  decommissionCluster: (clusterId) =>
    request(`/v1/clusters/${encodeURIComponent(clusterId)}/decommission`, { method: "POST" }),
};
