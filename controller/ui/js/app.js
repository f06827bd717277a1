// The dashboard: state, polling, the live log and the admin actions. Views live in render.js.
//
// Sources (all on this node's public API):
//  - GET /v1/log/stream: every record as it commits; each one schedules a (debounced) re-read of
//    GET /v1/metadata, so partitions, cluster states and fencing follow the log. The page reads the
//    topics it shows only: TOPICS_PER_PAGE of them by name (from a search prefix, paged), each with a
//    page of PARTITIONS_PER_PAGE partitions (paged per topic): a federation may hold 10,000 topics of
//    10,000 partitions.
//  - GET /v1/quorum, /v1/agents, /v1/drain every POLL_MS: state that is not in the log (roles,
//    applied offsets, leases, drain measurements). A poll also re-reads the metadata when the
//    quorum's high watermark is ahead of it, so the page stays current while the log is paused.

import { api, ApiError, token } from "./api.js";
import { h, replaceChildren } from "./dom.js";
import { drainView, gatewaysView, logEntry, quorumView, regionsView, topicsView } from "./render.js";
import { LogStream } from "./sse.js";

const POLL_MS = 1000;
const METADATA_DEBOUNCE_MS = 150; // records come in bursts (a topic's partitions are one batch)
const LOG_BACKLOG = 30; // records shown from before the page opened
const LOG_KEEP = 300; // entries kept in the page
const TOPICS_PER_PAGE = 20;
const PARTITIONS_PER_PAGE = 200;
const SEARCH_DEBOUNCE_MS = 200;

const $ = (testid) => document.querySelector(`[data-testid="${testid}"]`);

const state = {
  selfId: null,
  metadata: null,
  quorum: null,
  agents: { agents: [] },
  gateways: { gateways: [] },
  drain: { partitions: [] },
  lastOffset: -1, // last record shown in the log
  knownOffset: -1, // highest offset known committed (records seen, write replies): metadata waits for it
  paused: false,
  topics: {
    search: "", // shown: the topics whose names start with it
    first: "", // the page starts at the first topic named at or after this
    back: [], // where the pages before this one started
    partitions: new Map(), // topic -> first partition shown, for topics paged past their first
    version: 0, // of the query above: an answer to an older one is not shown
  },
  metadataVersion: -1, // the query version state.metadata answers
};

// -- messages ----------------------------------------------------------------------------------------
function showError(message) {
  const box = $("error");
  box.querySelector("p").textContent = message;
  box.hidden = false;
}

let noticeTimer = null;
function showNotice(message, forMs = 10_000) {
  const box = $("notice");
  box.textContent = message;
  box.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => (box.hidden = true), forMs);
}

function describe(error) {
  if (error instanceof ApiError) return `${error.message} (HTTP ${error.status})`;
  return `the node did not answer: ${error.message || error}`;
}

// -- metadata ----------------------------------------------------------------------------------------
let metadataTimer = null;
let metadataInFlight = null;
let metadataAgain = false;

/** Re-reads the merged metadata soon; calls during a read are folded into one more read after it. */
function refreshMetadataSoon() {
  if (metadataTimer) return;
  metadataTimer = setTimeout(() => {
    metadataTimer = null;
    refreshMetadata();
  }, METADATA_DEBOUNCE_MS);
}

async function refreshMetadata() {
  if (metadataInFlight) {
    metadataAgain = true;
    return metadataInFlight;
  }
  metadataInFlight = (async () => {
    try {
      const q = state.topics;
      const version = q.version;
      const md = await readTopics(q);
      const newer = !state.metadata || version > state.metadataVersion || md.offset >= state.metadata.offset;
      if (version === q.version && newer) {
        state.metadata = md;
        state.metadataVersion = version;
      } else if (version !== q.version) metadataAgain = true;
      setStale("metadata", null);
      renderMetadata();
    } catch (error) {
      setStale("metadata", describe(error));
    } finally {
      metadataInFlight = null;
      if (metadataAgain) {
        metadataAgain = false;
        refreshMetadataSoon();
      }
    }
  })();
  return metadataInFlight;
}

/** The metadata of the topics the query shows: a page of them, and the partition page each is at. */
async function readTopics(q) {
  const md = await api.metadata(state.knownOffset, {
    first: q.first,
    topicLimit: TOPICS_PER_PAGE,
    partitionLimit: PARTITIONS_PER_PAGE,
  });
  // names are in order: past the first that does not start with the search, none does
  md.topics = md.topics.filter((t) => t.name.startsWith(q.search));
  if (md.next_topic != null && !md.next_topic.startsWith(q.search)) md.next_topic = null;
  md.topics = await Promise.all(
    md.topics.map(async (t) => {
      const first = q.partitions.get(t.name) || 0;
      if (!first) return t;
      const page = await api.topicPage(md.offset, t.name, first, PARTITIONS_PER_PAGE).catch(() => null);
      return page && page.topics.length ? page.topics[0] : t; // deleted meanwhile: the next read drops it
    }),
  );
  return md;
}

/** Shows another set of topics (search, paging): read at once. */
function changeTopics(change) {
  change(state.topics);
  state.topics.version += 1;
  topicsSignature = "";
  refreshMetadata();
}

function wireTopics() {
  let timer = null;
  $("topic-search").addEventListener("input", (event) => {
    clearTimeout(timer);
    const search = event.target.value.trim();
    timer = setTimeout(() => changeTopics((q) => Object.assign(q, { search, first: search, back: [] })), SEARCH_DEBOUNCE_MS);
  });
  $("topic-search-form").addEventListener("submit", (event) => event.preventDefault());
  $("topics-next").addEventListener("click", () => {
    const next = state.metadata && state.metadata.next_topic;
    if (next != null) changeTopics((q) => Object.assign(q, { back: [...q.back, q.first], first: next }));
  });
  $("topics-prev").addEventListener("click", () => {
    if (state.topics.back.length) changeTopics((q) => Object.assign(q, { first: q.back.at(-1), back: q.back.slice(0, -1) }));
  });
}

function showPartitions(topic, first) {
  changeTopics((q) => (first ? q.partitions.set(topic, first) : q.partitions.delete(topic)));
}

// -- polling -----------------------------------------------------------------------------------------
async function poll() {
  if (state.selfId === null) await identifyNode();
  const [quorum, agents, drain, gateways] = await Promise.allSettled([
    api.quorum(),
    api.agents(),
    api.drain(),
    api.gateways(),
  ]);
  if (quorum.status === "fulfilled") {
    state.quorum = quorum.value;
    setStale("quorum", null);
    if (!state.metadata || quorum.value.high_watermark - 1 > state.metadata.offset) refreshMetadataSoon();
  } else setStale("quorum", describe(quorum.reason));
  // Leases and drain measurements live on the leader (these reads are forwarded to it): without a
  // leader they are unknown, which the panels say rather than showing old numbers.
  state.agents = agents.status === "fulfilled" ? agents.value : { error: describe(agents.reason) };
  state.drain = drain.status === "fulfilled" ? drain.value : { error: describe(drain.reason) };
  state.gateways = gateways.status === "fulfilled" ? gateways.value : { error: describe(gateways.reason) };
  renderPolled();
}

async function pollForever() {
  for (;;) {
    if (!document.hidden) await poll().catch((e) => console.error(e));
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

/** Which voter serves this page (marked in the quorum table). */
async function identifyNode() {
  try {
    const node = await api.node();
    state.selfId = node.id;
    $("node-label").textContent = `node ${node.id}`;
    setStale("node", null);
  } catch (error) {
    setStale("node", describe(error));
  }
}

const stale = new Map();
function setStale(source, message) {
  if (message) stale.set(source, message);
  else stale.delete(source);
  const box = $("stale");
  box.hidden = stale.size === 0;
  box.textContent = [...stale].map(([s, m]) => `${s}: ${m}`).join(" · ");
}

// -- rendering -----------------------------------------------------------------------------------------
function renderMetadata() {
  if (!state.metadata) return;
  $("metadata-offset").textContent = state.metadata.offset;
  renderClusters();
  renderTopics();
}

function renderPolled() {
  if (state.quorum) replaceChildren($("quorum-body"), quorumView(state.quorum, state.selfId));
  renderClusters();
  renderTopics();
  replaceChildren($("drain-body"), drainView(state.drain));
  replaceChildren($("gateways-body"), gatewaysView(state.gateways));
}

function renderClusters() {
  if (!state.metadata) return;
  const hw = state.quorum ? state.quorum.high_watermark : null;
  replaceChildren($("regions-body"), regionsView(state.metadata, state.agents, hw, confirmDecommission));
}

let topicsSignature = "";
function renderTopics() {
  if (!state.metadata) return;
  const drains = new Map((state.drain.partitions || []).map((r) => [`${r.topic}/${r.partition}`, r]));
  // Only rebuild when something shown changed: the grid holds many buttons.
  const md = state.metadata;
  const signature = JSON.stringify([md.offset, state.metadataVersion, md.clusters, [...drains.values()]]);
  if (signature === topicsSignature) return;
  topicsSignature = signature;
  const q = state.topics;
  $("topics-prev").disabled = !q.back.length;
  $("topics-next").disabled = md.next_topic == null;
  const names = md.topics.map((t) => t.name);
  $("topics-range").textContent = names.length
    ? `${names.length} topic${names.length === 1 ? "" : "s"}: ${names[0]} … ${names.at(-1)}`
    : "";
  const paging = { perPage: PARTITIONS_PER_PAGE, onPartitions: showPartitions };
  replaceChildren($("topics-body"), topicsView(md, drains, confirmReadOnly, paging, q.search));
}

// -- the live log ----------------------------------------------------------------------------------
const stream = new LogStream({
  onRecord(record) {
    state.lastOffset = record.offset;
    state.knownOffset = Math.max(state.knownOffset, record.offset);
    const list = $("log-list");
    list.prepend(logEntry(record));
    while (list.children.length > LOG_KEEP) list.lastElementChild.remove();
    $("log-next").textContent = record.offset + 1;
    refreshMetadataSoon();
  },
  onGone(problem) {
    const start = problem.log_start_offset ?? 0;
    logNotice(`${problem.detail || "offset below the retention window"} — continuing from offset ${start}`);
    stream.start(start);
  },
  onStatus(status, detail) {
    const pill = $("stream-status");
    const shown = state.paused && status === "stopped" ? "paused" : status;
    if (shown === "unauthorized" && pill.dataset.status !== shown) logNotice(`the log stream needs a token: ${detail}`);
    pill.dataset.status = shown;
    pill.textContent = shown;
    pill.title = detail || "";
  },
});

function logNotice(message) {
  const li = h("li", { class: "entry notice", "data-testid": "log-notice" }, message);
  $("log-list").prepend(li);
}

function pauseLog() {
  state.paused = true;
  stream.stop();
  $("log-resume-offset").value = state.lastOffset + 1;
  $("log-pause").disabled = true;
  $("log-resume").disabled = false;
}

/** Resumes from the offset in the field. Entries at or after it are dropped: they will come again. */
function resumeLog(event) {
  event.preventDefault();
  const field = $("log-resume-offset");
  const from = field.value === "" ? state.lastOffset + 1 : Number(field.value);
  if (!Number.isInteger(from) || from < 0) {
    showError("resume offset must be a whole number ≥ 0");
    return;
  }
  const list = $("log-list");
  for (const li of [...list.children]) if (li.dataset.offset === undefined || Number(li.dataset.offset) >= from) li.remove();
  if (from > state.lastOffset + 1) list.replaceChildren(); // a gap: what is left would mislead
  logNotice(`resumed from offset ${from}`);
  state.paused = false;
  state.lastOffset = from - 1;
  stream.start(from);
  $("log-pause").disabled = false;
  $("log-resume").disabled = true;
}

// -- admin actions (confirmed in a <dialog>) ---------------------------------------------------------
/** Opens the confirmation dialog; resolves true when the operator confirms. */
function confirmAction({ title, body, action }) {
  const dialog = $("confirm-dialog");
  dialog.querySelector("#confirm-title").textContent = title;
  dialog.querySelector("#confirm-body").textContent = body;
  $("confirm-ok").textContent = action;
  dialog.returnValue = "";
  dialog.showModal();
  $("confirm-cancel").focus();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "confirm"), { once: true });
  });
}

async function adminWrite(what, write) {
  try {
    const reply = await write();
    $("error").hidden = true;
    showNotice(`${what}: committed at offset ${reply.offset}`);
    state.knownOffset = Math.max(state.knownOffset, reply.offset);
    await refreshMetadata();
  } catch (error) {
    showError(`${what} failed: ${describe(error)}`);
  }
}

async function confirmReadOnly(topic, p) {
  const ok = await confirmAction({
    title: `Set ${topic} P${p.partition} read-only?`,
    body:
      `Producers stop writing to P${p.partition} (on ${p.cluster_id}) at once; consumers keep reading it. ` +
      "It is removed once every group reading the topic has consumed it to the end.",
    action: "Set read-only",
  });
  if (ok) await adminWrite(`${topic} P${p.partition} read-only`, () => api.setPartitionState(topic, p.partition, "read_only"));
}

async function confirmDecommission(cluster) {
  const ok = await confirmAction({
    title: `Decommission cluster ${cluster.cluster_id}?`,
    body:
      `Every partition on ${cluster.cluster_id} goes read-only now; the cluster drains and is ` +
      "decommissioned once its partitions are consumed. This cannot be undone from here.",
    action: "Decommission",
  });
  if (ok) await adminWrite(`decommission ${cluster.cluster_id}`, () => api.decommissionCluster(cluster.cluster_id));
}

// -- the token ---------------------------------------------------------------------------------------
function showTokenState() {
  const set = Boolean(token.get());
  $("token-state").textContent = set ? "token set" : "no token";
  $("token-state").dataset.set = set;
}

function wireToken() {
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const field = $("token-input");
    token.set(field.value.trim());
    field.value = "";
    showTokenState();
    // Reads may need the token too: read again now rather than at the next failure.
    if (!state.paused) stream.start(state.lastOffset + 1);
    refreshMetadata();
  });
  $("token-clear").addEventListener("click", () => {
    token.set("");
    showTokenState();
  });
  showTokenState();
}

// -- start ---------------------------------------------------------------------------------------------
async function main() {
  wireToken();
  wireTopics();
  $("error").querySelector("button").addEventListener("click", () => ($("error").hidden = true));
  $("log-pause").addEventListener("click", pauseLog);
  $("log-resume-form").addEventListener("submit", resumeLog);

  await identifyNode();
  await refreshMetadata();
  const start = state.metadata ? Math.max(0, state.metadata.offset - LOG_BACKLOG + 1) : 0;
  state.lastOffset = start - 1;
  stream.start(start);
  pollForever();
}

main();
