// Pure views: API JSON in, DOM nodes out. No fetching and no state here (see app.js).

import { ago, clockTime, h } from "./dom.js";

// -- quorum ----------------------------------------------------------------------------------------
/** Records a voter still has to apply: the high watermark is the offset the *next* record gets. */
function lagOf(highWatermark, appliedOffset) {
  return appliedOffset === null || appliedOffset === undefined ? null : Math.max(0, highWatermark - 1 - appliedOffset);
}

export function quorumView(quorum, selfId) {
  const leader = quorum.voters.find((v) => v.id === quorum.leader_id);
  const summary = h(
    "dl",
    { class: "facts", "data-testid": "quorum-summary" },
    fact("Leader", leader ? `node ${leader.id}` : "none", "quorum-leader"),
    fact("Term", quorum.term, "quorum-term"),
    fact("High watermark", quorum.high_watermark, "quorum-hw"),
    fact("Voters", quorum.voters.length),
  );
  const rows = quorum.voters.map((v) => {
    const lag = lagOf(quorum.high_watermark, v.applied_offset);
    return h(
      "tr",
      { "data-testid": "voter", "data-node": v.id, "data-role": v.role },
      h("th", { scope: "row" }, `node ${v.id}`, v.id === selfId ? h("span", { class: "tag" }, "this page") : null),
      h("td", {}, h("span", { class: `role role-${v.role}` }, v.role)),
      h("td", { class: "num", "data-testid": "voter-applied" }, v.applied_offset ?? "—"),
      h("td", { class: `num ${lag ? "warn" : ""}`, "data-testid": "voter-lag" }, lag ?? "—"),
      h("td", { class: "mono dim" }, v.http),
      h("td", { class: "mono dim" }, v.raft),
    );
  });
  const table = h(
    "table",
    { class: "grid" },
    h("caption", { class: "sr-only" }, "Voters of the quorum"),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        ...[["Node"], ["Role"], ["Applied offset", "num"], ["Lag", "num"], ["HTTP"], ["Raft"]].map(([c, cls]) =>
          h("th", { scope: "col", class: cls }, c),
        ),
      ),
    ),
    h("tbody", {}, rows),
  );
  return [summary, table];
}

function fact(label, value, testid) {
  return h("div", { class: "fact" }, h("dt", {}, label), h("dd", { "data-testid": testid }, value));
}

// -- regions and clusters --------------------------------------------------------------------------
/**
 * @param metadata GET /v1/metadata
 * @param agents GET /v1/agents, or {error} when it could not be read
 * @param highWatermark from GET /v1/quorum (for the agents' lag), or null
 */
export function regionsView(metadata, agents, highWatermark, onDecommission, now = Date.now()) {
  if (!metadata.clusters.length) return [h("p", { class: "empty" }, "No cluster is registered yet.")];
  const leases = new Map((agents.agents || []).map((a) => [a.cluster_id, a]));
  const partitionCount = new Map(); // of the page of topics shown (a federation may hold 100 M)
  for (const t of metadata.topics)
    for (const p of t.partitions)
      if (p.state !== "removed") partitionCount.set(p.cluster_id, (partitionCount.get(p.cluster_id) || 0) + 1);

  const context = { leases, agentsError: agents.error, partitionCount, highWatermark, onDecommission, now };
  const regions = groupBy(metadata.clusters, (c) => c.region);
  return [...regions].map(([region, clusters]) =>
    h(
      "section",
      { class: "region", "data-testid": "region", "data-region": region, "aria-label": `Region ${region}` },
      h("h3", {}, "Region ", h("span", { class: "mono" }, region)),
      h(
        "ul",
        { class: "cards" },
        clusters.map((c) => clusterCard(c, context)),
      ),
    ),
  );
}

function clusterCard(c, { leases, agentsError, partitionCount, highWatermark, onDecommission, now }) {
  const lease = leases.get(c.cluster_id);
  const health = c.fenced
    ? h(
        "div",
        { class: "health fenced", "data-testid": "cluster-health" },
        h("strong", {}, "fenced"),
        c.fenced_since_ms ? ` since ${clockTime(c.fenced_since_ms)} (${ago(c.fenced_since_ms, now)})` : null,
        c.fenced_reason ? h("div", { class: "reason" }, c.fenced_reason) : null,
      )
    : h("div", { class: "health ok", "data-testid": "cluster-health" }, h("strong", {}, "healthy"));

  let agent;
  if (agentsError) agent = h("span", { class: "dim" }, `agent status unavailable: ${agentsError}`);
  else if (!lease) agent = h("span", { class: "warn" }, "no heartbeat seen by this leader");
  else {
    const lag = highWatermark === null ? null : lagOf(highWatermark, lease.applied_offset);
    agent = [
      h("span", { "data-testid": "agent-applied" }, `applied offset ${lease.applied_offset}`),
      lag ? h("span", { class: "warn" }, ` (${lag} behind)`) : null,
      h("span", { class: "dim" }, ` · heartbeat ${ago(lease.last_heartbeat_ms, now)}`),
      lease.healthy || (c.fenced && lease.reason === c.fenced_reason)
        ? null
        : h("div", { class: "reason" }, `reports unhealthy: ${lease.reason || "no reason given"}`),
    ];
  }

  return h(
    "li",
    {
      class: `card cluster ${c.fenced ? "is-fenced" : ""}`,
      "data-testid": "cluster-card",
      "data-cluster": c.cluster_id,
      "data-state": c.state,
      "data-fenced": c.fenced ? "true" : "false",
    },
    h(
      "div",
      { class: "card-head" },
      h("h4", {}, c.cluster_id),
      h("span", { class: `badge state-${c.state}`, "data-testid": "cluster-state" }, c.state.replace("_", " ")),
    ),
    health,
    h(
      "dl",
      { class: "kv" },
      h("dt", {}, "Bootstrap"),
      h("dd", { class: "mono" }, c.bootstrap_servers),
      h("dt", { title: "of the topics shown below" }, "Partitions shown"),
      h("dd", {}, partitionCount.get(c.cluster_id) || 0),
      h("dt", {}, "Agent"),
      h("dd", { "data-testid": "cluster-agent" }, agent),
    ),
    c.state === "decommissioned"
      ? null
      : h(
          "button",
          {
            type: "button",
            class: "danger small",
            "data-testid": "cluster-decommission",
            "data-key": `decommission:${c.cluster_id}`,
            onclick: () => onDecommission(c),
          },
          "Decommission…",
        ),
  );
}

// -- logical topics --------------------------------------------------------------------------------
/**
 * What a partition cell shows: removed and fenced win over the partition's own state, because a
 * fenced cluster takes no writes whatever the partition says. `note` says why, when not obvious.
 */
export function displayState(p, cluster) {
  if (p.state === "removed") return { state: "removed", note: null };
  if (cluster?.fenced) return { state: "fenced", note: null }; // the reason is on the cluster's card
  if (p.state === "read_only") return { state: "read_only", note: null };
  if (!p.writable) return { state: "read_only", note: cluster ? `cluster ${cluster.state.replace("_", " ")}` : "no cluster" };
  return { state: "writable", note: p.leader ? null : "no leader yet" };
}

const STATE_LABEL = { writable: "writable", read_only: "read only", removed: "removed", fenced: "fenced" };

/** "N logical partitions", and which are shown when the view lists a page of them (next_partition). */
function partitionCount(t) {
  const count = t.partition_count ?? t.partitions.length;
  return `${count.toLocaleString("en")} logical partitions`;
}

/** "P0–P199 of 10,000" with buttons to the pages around it, for a topic with more partitions than a page. */
function partitionPager(t, { perPage, onPartitions }) {
  const count = t.partition_count ?? t.partitions.length;
  const first = t.partitions.length ? t.partitions[0].partition : 0;
  if (count <= t.partitions.length && first === 0) return null;
  const last = t.partitions.length ? t.partitions[t.partitions.length - 1].partition : first;
  return h(
    "span",
    { class: "pager", "data-testid": "partition-pager" },
    h("button", { type: "button", "data-testid": "partitions-prev", disabled: first === 0,
      onclick: () => onPartitions(t.name, Math.max(0, first - perPage)) }, "‹"),
    h("span", { "data-testid": "partitions-range" },
      `P${first}–P${last} of ${count.toLocaleString("en")}`),
    h("button", { type: "button", "data-testid": "partitions-next", disabled: t.next_partition == null,
      onclick: () => onPartitions(t.name, t.next_partition) }, "›"),
  );
}

/**
 * @param drains Map "topic/partition" -> drain row of GET /v1/drain
 * @param paging {perPage, onPartitions(topic, firstPartition)}: a topic's partitions are shown a page at a time
 */
export function topicsView(metadata, drains, onReadOnly, paging, search = "") {
  if (!metadata.topics.length) {
    const none = search ? `No logical topic starts with “${search}”.` : "No logical topic yet.";
    return [h("p", { class: "empty", "data-testid": "topics-empty" }, none)];
  }
  const clusters = new Map(metadata.clusters.map((c) => [c.cluster_id, c]));
  return metadata.topics.map((t) => {
    const shown = t.partitions.map((p) => ({ p, ...displayState(p, clusters.get(p.cluster_id)) }));
    const counts = countBy(shown, (s) => s.state);
    const lanes = groupBy(shown, (s) => s.p.cluster_id);
    return h(
      "article",
      { class: "topic", "data-testid": "topic", "data-topic": t.name, "aria-labelledby": `topic-${t.name}` },
      h(
        "header",
        { class: "topic-head" },
        h("h3", { id: `topic-${t.name}` }, t.name),
        h("span", { class: "dim" }, `region ${t.region} · ${partitionCount(t)}`),
        partitionPager(t, paging),
        h(
          "span",
          { class: "counts" },
          Object.keys(STATE_LABEL)
            .filter((s) => counts.get(s))
            .map((s) => h("span", { class: `badge state-${s}` }, `${counts.get(s)} ${STATE_LABEL[s]}`)),
        ),
      ),
      [...lanes].sort(([a], [b]) => a.localeCompare(b)).map(([clusterId, cells]) => {
        const c = clusters.get(clusterId);
        return h(
          "div",
          { class: "lane", "data-testid": "lane", "data-cluster": clusterId },
          h(
            "div",
            { class: "lane-label" },
            h("span", { class: "mono" }, clusterId),
            c ? h("span", { class: "dim small-text" }, c.fenced ? "fenced" : c.state.replace("_", " ")) : null,
          ),
          h("ul", { class: "cells" }, cells.map((s) => partitionCell(t.name, s, drains.get(`${t.name}/${s.p.partition}`), onReadOnly))),
        );
      }),
    );
  });
}

function partitionCell(topic, { p, state, note }, drain, onReadOnly) {
  return h(
    "li",
    {
      class: `cell state-${state}`,
      "data-testid": "partition-cell",
      "data-topic": topic,
      "data-partition": p.partition,
      "data-cluster": p.cluster_id,
      "data-state": state,
      "data-partition-state": p.state,
      title: `${topic} P${p.partition}: leader ${p.leader || "none"}`,
    },
    h(
      "div",
      { class: "cell-head" },
      h("span", { class: "pid" }, `P${p.partition}`),
      h("span", { class: "cell-state", "data-testid": "partition-state" }, STATE_LABEL[state]),
    ),
    h("div", { class: "cell-where mono" }, `${p.cluster_id} · ${p.physical_topic}/${p.physical_partition}`),
    note || drainNote(drain, state) ? h("div", { class: "cell-note" }, note || drainNote(drain, state)) : null,
    p.state === "writable"
      ? h(
          "button",
          {
            type: "button",
            class: "small ghost",
            "data-testid": "partition-readonly",
            "data-key": `readonly:${topic}:${p.partition}`,
            "aria-label": `Set ${topic} P${p.partition} read-only`,
            onclick: () => onReadOnly(topic, p),
          },
          "Set read-only…",
        )
      : null,
  );
}

/** How far a read-only partition is from removal, from GET /v1/drain (null when not draining). */
function drainNote(drain, state) {
  if (!drain || state === "removed") return null;
  if (drain.drained) return "drained";
  return drain.lag === null || drain.lag === undefined ? "draining" : `draining · lag ${drain.lag}`;
}

// -- Kafka gateways ------------------------------------------------------------------------------------
/** The gateway instances (kfed gateway): live or not, their clients and their load, as the leader sees them. */
export function gatewaysView(gateways, now = Date.now()) {
  if (gateways.error) return [h("p", { class: "dim" }, `Gateways unavailable: ${gateways.error}`)];
  if (!gateways.gateways.length) return [h("p", { class: "empty" }, "No Kafka gateway has registered.")];
  const rows = gateways.gateways.map((g) =>
    h(
      "tr",
      { "data-testid": "gateway-row", "data-gateway": g.gateway_id, "data-live": String(g.live) },
      h("th", { scope: "row" }, `broker ${g.gateway_id}`),
      h("td", { class: "mono" }, `${g.host}:${g.port}`),
      h("td", {}, g.listener || "PLAINTEXT"),
      h("td", {}, h("span", { class: g.live ? "ok-text" : "warn" }, g.live ? "live" : "gone")),
      h("td", { class: "mono" }, g.connections === null ? "—" : String(g.connections)),
      h("td", { class: "mono" }, g.requests_per_s === null ? "—" : g.requests_per_s.toFixed(1)),
      h("td", { class: "dim" }, g.last_heartbeat_ms ? ago(g.last_heartbeat_ms, now) : "no heartbeat this term"),
    ),
  );
  const columns = ["Gateway", "Address", "Listener", "State", "Connections", "Requests/s", "Last heartbeat"];
  return [
    h(
      "table",
      { class: "grid" },
      h("caption", { class: "sr-only" }, "Kafka gateway instances"),
      h("thead", {}, h("tr", {}, ...columns.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows),
    ),
  ];
}

// -- drain progress ----------------------------------------------------------------------------------
export function drainView(drain) {
  if (drain.error) return [h("p", { class: "dim" }, `Drain progress unavailable: ${drain.error}`)];
  if (!drain.partitions.length) return [h("p", { class: "empty" }, "No partition is draining.")];
  const rows = drain.partitions.map((r) => {
    const done = r.end_offset && r.lag !== null ? Math.max(0, Math.min(1, 1 - r.lag / r.end_offset)) : null;
    return h(
      "tr",
      { "data-testid": "drain-row", "data-topic": r.topic, "data-partition": r.partition },
      h("th", { scope: "row" }, `${r.topic} P${r.partition}`),
      h("td", { class: "mono" }, `${r.cluster_id} · ${r.physical_topic}/${r.physical_partition}`),
      h("td", {}, h("span", { class: `badge state-${r.state}` }, r.state.replace("_", " "))),
      h(
        "td",
        {},
        r.drained
          ? h("span", { class: "ok-text" }, "drained")
          : h(
              "span",
              { class: "progress-wrap" },
              done === null
                ? null
                : h("progress", { max: 1, value: done, "aria-label": `drain of ${r.topic} P${r.partition}` }),
              h("span", { class: "dim" }, r.lag === null ? "not measured yet" : `lag ${r.lag} of ${r.end_offset}`),
            ),
      ),
      h("td", { class: "dim wrap" }, r.waiting_for || "—"),
    );
  });
  return [
    h(
      "table",
      { class: "grid" },
      h("caption", { class: "sr-only" }, "Partitions on their way out"),
      h(
        "thead",
        {},
        h("tr", {}, ...["Partition", "Physical", "State", "Progress", "Waiting for"].map((c) => h("th", { scope: "col" }, c))),
      ),
      h("tbody", {}, rows),
    ),
  ];
}

// -- the metadata log ----------------------------------------------------------------------------------
/** One line saying what a record did (the full data is in the entry's tooltip). */
export function summarize({ type, data }) {
  const d = data || {};
  switch (type) {
    case "ClusterRegistered":
      return `${d.cluster_id} in ${d.region} (${d.bootstrap_servers})`;
    case "ClusterStateChanged":
      return `${d.cluster_id} → ${d.state}`;
    case "ClusterFenced":
      return `${d.cluster_id}: ${d.reason}`;
    case "ClusterUnfenced":
      return `${d.cluster_id}`;
    case "PhysicalPartitionsReported":
      return `${d.cluster_id} ${d.physical_topic}/${d.physical_partition} leader ${d.leader ?? "none"}`;
    case "TopicCreated":
      return `${d.name} in ${d.region}`;
    case "PartitionsAdded":
      return `${d.topic} P${d.partition} → ${d.cluster_id} ${d.physical_topic}/${d.physical_partition}`;
    case "PartitionStateChanged":
      return `${d.topic} P${d.partition} → ${d.state}`;
    case "TopicDeleted":
      return d.name;
    case "GroupCoordinatorAssigned":
      return `${d.group} → node ${d.coordinator_id}`;
    case "GroupGenerationStarted":
      return `${d.group} generation ${d.generation}, ${(d.members || []).length} members`;
    case "QuorumVoterChanged":
      return `node ${d.voter_id} ${d.voter ? "joined" : "left"} (${d.http})`;
    case "NoOp":
      return "";
    default:
      return JSON.stringify(d);
  }
}

export function logEntry(record) {
  return h(
    "li",
    {
      class: `entry type-${record.type}`,
      "data-testid": "log-record",
      "data-offset": record.offset,
      "data-type": record.type,
      title: JSON.stringify(record.data),
    },
    h("span", { class: "offset mono" }, record.offset),
    h("span", { class: "type" }, record.type),
    h("span", { class: "summary" }, summarize(record)),
  );
}

// -- helpers ---------------------------------------------------------------------------------------
function groupBy(items, keyOf) {
  const groups = new Map();
  for (const item of items) {
    const key = keyOf(item);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(item);
  }
  return groups;
}

function countBy(items, keyOf) {
  const counts = new Map();
  for (const item of items) counts.set(keyOf(item), (counts.get(keyOf(item)) || 0) + 1);
  return counts;
}
