// Phoenix dashboard (phx ui): a page over /ui/api, live through server-sent events.
// No framework, no assets from elsewhere: everything here is served by the package.
"use strict";

const API = "api";
const KINDS = ["tool", "failure", "checkpoint", "session", "drift"];
const KIND_LABEL = { tool: "tool calls", failure: "failures", checkpoint: "checkpoints", session: "sessions", drift: "drift" };
const COLUMNS = [["pending", "Pending"], ["in_progress", "In progress"], ["blocked", "Blocked"], ["done", "Done"]];

let session = null;   // /api/session
let stream = null;    // the live stream's AbortController
let current = null;   // the route being shown

// -- small helpers ---------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "html") node.innerHTML = value;  // only for HTML the server rendered from Markdown
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const enc = encodeURIComponent;

function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (isNaN(d)) return String(iso);
  return d.toISOString().slice(0, 19).replace("T", " ") + "Z";
}

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86400)} d ago`;
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 60) return `${seconds}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ${seconds % 60}s`;
  return `${Math.floor(seconds / 3600)}h ${Math.floor((seconds % 3600) / 60)}m`;
}

function badge(text, cls) { return el("span", { class: `badge ${cls}` }, text); }

function token() { return sessionStorage.getItem("phx-token"); }

function headers() {
  const t = token();
  return t ? { Authorization: `Bearer ${t}` } : {};
}

class HttpError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

async function api(path, options) {
  const response = await fetch(`${API}/${path}`, { headers: headers(), cache: "no-store", ...(options || {}) });
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new HttpError(response.status, detail);
  }
  return response.json();
}

function setLive(on, text) {
  const live = document.getElementById("live");
  live.className = `live ${on ? "on" : "off"}`;
  live.textContent = text;
}

// -- the views -------------------------------------------------------------------------------------

function verdictCell(row) {
  return el("td", {}, badge(row.verdict, `v-${row.verdict}`), row.detail ? el("div", { class: "why" }, row.detail) : null);
}

function renderOverview(doc, focus) {
  const nodes = [];
  const counts = Object.entries(doc.counts || {}).map(([k, v]) => `${v} ${k}`).join(" · ") || "no agents yet";
  if (focus !== "teams" && focus !== "clinic") {
    nodes.push(el("h1", {}, "Agents"), el("p", { class: "muted" }, `${counts} · store: ${doc.store} · checked ${when(doc.checked_at)}`));
    const stalled = (doc.agents || []).filter((r) => ["stalled", "hung", "stopped"].includes(r.verdict));
    for (const row of stalled) {
      nodes.push(el("div", { class: "alert", role: "alert" }, `${row.agent}${row.lane ? " / " + row.lane : ""} is ${row.verdict}: ${row.detail}`));
    }
    const body = (doc.agents || []).map((row) =>
      el("tr", { tabindex: 0, "data-row": true, "data-agent": row.agent, "data-key": `agent:${row.agent}:${row.lane || ""}` },
        el("td", {}, el("a", { href: `#/agent/${enc(row.agent)}` }, row.agent), row.lane ? el("div", { class: "why" }, `lane ${row.lane}`) : null),
        el("td", {}, row.status || "—"),
        verdictCell(row),
        el("td", {}, row.task || "—", row.next_action ? el("div", { class: "why" }, `next: ${row.next_action}`) : null),
        el("td", { class: "hide-narrow" }, row.process, row.pid ? el("div", { class: "why" }, `pid ${row.pid} on ${row.host || "?"}`) : null),
        el("td", {}, ago(row.idle_seconds)),
      ));
    nodes.push(el("div", { class: "scroll" }, el("table", { "aria-label": "Agents" },
      el("thead", {}, el("tr", {}, ["Agent", "Status", "Liveness", "Task", "Process", "Last activity"].map((h, i) =>
        el("th", { scope: "col", class: i === 4 ? "hide-narrow" : null }, h)))),
      el("tbody", {}, body.length ? body : el("tr", {}, el("td", { colspan: 6, class: "muted" }, "No agents in this home yet."))))));
  }
  if (focus !== "clinic") {
    nodes.push(el("h2", {}, "Teams"));
    const teams = (doc.teams || []).map((t) => t.problem
      ? el("div", { class: "card" }, el("h3", {}, t.team_id), el("p", { class: "alert" }, t.problem))
      : el("div", { class: "card", "data-team": t.team_id },
        el("h3", {}, el("a", { href: `#/team/${enc(t.team_id)}` }, t.name || t.team_id)),
        el("p", {}, `${t.status} · lead ${t.lead} · ${t.teammates} teammate(s)`),
        el("p", { class: "why" }, COLUMNS.map(([k, label]) => `${label}: ${t.board[k]}`).join(" · ")),
        el("p", {}, Object.entries(t.liveness || {}).map(([k, v]) => [badge(`${v} ${k}`, `c-${k}`), " "]))));
    nodes.push(teams.length ? el("div", { class: "cards" }, teams) : el("p", { class: "muted" }, "No teams."));
  }
  if (focus !== "clinic" && (doc.claude_teams || []).length) {
    nodes.push(el("h2", {}, "Claude Code agent teams"));
    nodes.push(el("div", { class: "cards" }, doc.claude_teams.map((t) => el("div", { class: "card", "data-claude-team": t.team_name },
      el("h3", {}, el("a", { href: `#/claude/${enc(t.team_name)}` }, t.team_name), " ", badge(t.state, `s-${t.state}`)),
      el("p", {}, `${t.teammates} teammate(s) · ${t.tasks} task(s) · ${t.messages} message(s)`),
      el("p", { class: "why" }, `lead session ${t.lead_session_id || "—"}`)))));
  }
  if (focus !== "teams") {
    nodes.push(el("h2", {}, "Clinic"), el("p", {}, el("a", { href: "#/clinic" },
      `${doc.clinic.episodes} episode(s): ${doc.clinic.healed} healed, ${doc.clinic.gave_up} gave up`)));
  }
  return nodes;
}

function timelineChart(tl) {
  if (!tl || !tl.total) return el("p", { class: "muted" }, "No events yet.");
  const W = 720, H = 150, pad = 24, n = tl.series.tool.length;
  const totals = Array.from({ length: n }, (_, i) => tl.series.tool[i] + tl.series.checkpoint[i]);
  const max = Math.max(1, ...totals);
  const bw = (W - 2 * pad) / n;
  const bars = [];
  for (let i = 0; i < n; i++) {
    let y = H - pad;
    // A bar per bucket: successful calls, failed calls (of the tool calls), checkpoints on top.
    const parts = { tool: tl.series.tool[i] - tl.series.failure[i], failure: tl.series.failure[i], checkpoint: tl.series.checkpoint[i] };
    for (const kind of ["tool", "failure", "checkpoint"]) {
      const v = parts[kind];
      if (!v) continue;
      const h = ((H - 2 * pad) * v) / max;
      y -= h;
      bars.push(svg("rect", { x: pad + i * bw + 1, y, width: Math.max(1, bw - 2), height: h, fill: `var(--${kind})` },
        svg("title", {}, `${v} ${KIND_LABEL[kind]}`)));
    }
  }
  const start = Date.parse(tl.start), end = Date.parse(tl.end), span = Math.max(1, end - start);
  const marks = (tl.marks || []).map((m) => {
    const x = pad + ((m.ms - start) / span) * (W - 2 * pad);
    return svg("line", { x1: x, x2: x, y1: pad - 6, y2: H - pad, stroke: `var(--${m.kind})`, "stroke-width": m.kind === "drift" ? 3 : 1.5,
      "stroke-dasharray": m.kind === "session" ? "4 3" : "none", class: `mark-${m.kind}` }, svg("title", {}, `${when(m.ts)} ${m.label}`));
  });
  const axis = [
    svg("line", { x1: pad, x2: W - pad, y1: H - pad, y2: H - pad, stroke: "var(--line)" }),
    svg("text", { x: pad, y: H - 6, "font-size": 11, fill: "var(--muted)" }, when(tl.start)),
    svg("text", { x: W - pad, y: H - 6, "font-size": 11, fill: "var(--muted)", "text-anchor": "end" }, when(tl.end)),
    svg("text", { x: pad, y: 14, "font-size": 11, fill: "var(--muted)" }, `max ${max} per ${duration(Math.round(tl.bucket_ms / 1000))}`),
  ];
  const drifts = (tl.marks || []).filter((m) => m.kind === "drift").length;
  return [
    svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img",
      "aria-label": `Timeline: ${tl.total} events, ${tl.series.failure.reduce((a, b) => a + b, 0)} failures, ${drifts} drift episode(s)` },
      axis, bars, marks),
    el("div", { class: "legend" }, KINDS.map((k) => el("span", { style: null, "data-kind": k, class: `lg-${k}` }, KIND_LABEL[k]))),
  ];
}

function renderAgent(doc) {
  const id = doc.agent;
  const nodes = [el("h1", {}, `Agent ${id}`)];
  nodes.push(el("div", { class: "scroll" }, el("table", { "aria-label": "Lanes" },
    el("thead", {}, el("tr", {}, ["Lane", "Status", "Liveness", "Task", "Session", "Last activity"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, doc.lanes.map((row) => el("tr", {},
      el("td", {}, row.lane || "primary"), el("td", {}, row.status || "—"), verdictCell(row), el("td", {}, row.task || "—"),
      el("td", {}, row.session_id || "—"), el("td", {}, ago(row.idle_seconds))))))));
  if (session && session.can_write.agents) {
    nodes.push(el("p", {}, el("button", { class: "primary", id: "take-checkpoint", onclick: async (e) => {
      e.target.disabled = true;
      try { await api(`agents/${enc(id)}/checkpoint`, { method: "POST" }); } catch (err) { alert(err.message); }
      e.target.disabled = false;
    } }, "Take a checkpoint now")));
  }
  nodes.push(el("h2", {}, "Timeline"), timelineChart(doc.timeline));
  nodes.push(el("h2", {}, "Brief"), doc.brief_html ? el("article", { class: "brief", html: doc.brief_html }) : el("p", { class: "muted" }, "No brief yet."));
  nodes.push(el("h2", {}, "Checkpoints"));
  if (doc.checkpoints.length) {
    const rows = doc.checkpoints.map((c, i) => el("tr", { tabindex: 0, "data-row": true, "data-key": `checkpoint:${c.name}` },
      el("td", {}, el("input", { type: "checkbox", name: "pick", value: c.name, "aria-label": `compare ${c.name}`, checked: i < 2 && doc.checkpoints.length > 1 })),
      el("td", {}, el("a", { href: `#/agent/${enc(id)}/checkpoint/${enc(c.name)}` }, `#${c.seq}`)),
      el("td", {}, c.checkpoint_type), el("td", {}, when(c.timestamp)), el("td", { class: "hide-narrow" }, c.label || "")));
    nodes.push(el("div", { class: "scroll" }, el("table", { "aria-label": "Checkpoints" },
      el("thead", {}, el("tr", {}, ["", "Seq", "Type", "Taken", "Summary"].map((h, i) => el("th", { scope: "col", class: i === 4 ? "hide-narrow" : null }, h)))),
      el("tbody", {}, rows))));
    nodes.push(el("p", {}, el("button", { id: "compare", onclick: () => {
      const picked = [...document.querySelectorAll("input[name=pick]:checked")].map((x) => x.value);
      if (picked.length !== 2) { alert("Pick two checkpoints to compare."); return; }
      location.hash = `#/agent/${enc(id)}/diff/${enc(picked[1])}/${enc(picked[0])}`;
    } }, "Compare the two picked")));
  } else nodes.push(el("p", { class: "muted" }, "No checkpoints yet."));
  nodes.push(el("h2", {}, "Sessions"));
  nodes.push(doc.sessions.length ? el("div", { class: "scroll" }, el("table", { "aria-label": "Sessions" },
    el("thead", {}, el("tr", {}, ["Session", "Status", "Started", "Ended", "Duration"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, doc.sessions.map((s) => el("tr", {}, el("td", {}, s.session_id), el("td", {}, s.status),
      el("td", {}, when(s.started_at)), el("td", {}, when(s.ended_at)), el("td", {}, duration(s.duration_seconds)))))))
    : el("p", { class: "muted" }, "No sessions recorded."));
  if (doc.clinic.length) nodes.push(el("h2", {}, "Clinic"), doc.clinic.map(renderEpisode));
  nodes.push(el("h2", {}, "Recent events"), el("div", { class: "scroll" }, el("table", { "aria-label": "Recent events" },
    el("thead", {}, el("tr", {}, ["#", "When", "Event", "Status", "Details"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, doc.recent_events.slice(0, 30).map((e) => el("tr", {}, el("td", {}, e.seq), el("td", {}, when(e.ts)),
      el("td", {}, e.event), el("td", {}, e.status), el("td", { class: "why" }, summarize(e.meta))))))));
  return nodes;
}

function summarize(meta) {
  if (!meta || typeof meta !== "object") return "";
  return Object.entries(meta).filter(([, v]) => v !== null && v !== "" && typeof v !== "object")
    .slice(0, 5).map(([k, v]) => `${k}=${String(v).slice(0, 80)}`).join(" ");
}

function renderEpisode(ep) {
  return el("div", { class: "card", "data-episode": ep.episode },
    el("h3", {}, `${ep.agent_name || ep.agent} · `, badge(ep.outcome, `o-${ep.outcome}`)),
    el("p", { class: "why" }, `${when(ep.started_at)} · agent ${ep.agent} · ${ep.recoveries} recovery(ies)`),
    ep.prompt ? el("p", {}, `Prompt: ${ep.prompt}`) : null,
    el("div", { class: "scroll" }, el("table", { "aria-label": "Visits" },
      el("thead", {}, el("tr", {}, ["Visit", "Diagnosis", "Confidence", "Prescription", "Outcome", "Error"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, ep.visits.map((v) => el("tr", {}, el("td", {}, v.attempt), el("td", {}, v.root_cause || "—", v.source ? el("div", { class: "why" }, v.source) : null),
        el("td", {}, v.confidence === null || v.confidence === undefined ? "—" : Number(v.confidence).toFixed(2)),
        el("td", {}, v.action || "—"), el("td", {}, v.outcome || "—"),
        el("td", { class: "why" }, `${v.error_type || ""} ${v.error || ""}`.trim())))))));
}

function renderClinic(doc) {
  return [el("h1", {}, "Clinic"), doc.episodes.length ? doc.episodes.map(renderEpisode) : el("p", { class: "muted" }, "No Clinic episodes.")];
}

function dependencyGraph(tasks, edges) {
  if (!edges.length) return el("p", { class: "muted" }, "No dependencies between tasks.");
  const byId = Object.fromEntries(tasks.map((t) => [t.task_id, t]));
  const depth = {};
  const visit = (id, seen) => {
    if (depth[id] !== undefined) return depth[id];
    if (seen.has(id)) return 0;
    seen.add(id);
    const deps = (byId[id] && byId[id].dependencies) || [];
    depth[id] = deps.length ? 1 + Math.max(...deps.map((d) => visit(d, seen))) : 0;
    return depth[id];
  };
  tasks.forEach((t) => visit(t.task_id, new Set()));
  const layers = [];
  tasks.forEach((t) => { (layers[depth[t.task_id]] = layers[depth[t.task_id]] || []).push(t); });
  const BW = 170, BH = 40, GX = 60, GY = 14;
  const pos = {};
  layers.forEach((layer, x) => layer.forEach((t, y) => { pos[t.task_id] = { x: 10 + x * (BW + GX), y: 10 + y * (BH + GY) }; }));
  const W = 20 + layers.length * (BW + GX), H = 20 + Math.max(...layers.map((l) => l.length)) * (BH + GY);
  const paths = edges.filter((e) => pos[e.from] && pos[e.to]).map((e) => {
    const a = pos[e.from], b = pos[e.to];
    const x1 = a.x + BW, y1 = a.y + BH / 2, x2 = b.x, y2 = b.y + BH / 2;
    return svg("path", { d: `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2 - 4},${y2}` });
  });
  const boxes = tasks.map((t) => {
    const p = pos[t.task_id];
    return svg("g", { class: t.column, transform: `translate(${p.x},${p.y})` },
      svg("rect", { width: BW, height: BH, rx: 6 }),
      svg("text", { x: 8, y: 16 }, `${t.task_id} · ${t.column.replace("_", " ")}`),
      svg("text", { x: 8, y: 32 }, String(t.title || "").slice(0, 24)));
  });
  return svg("svg", { class: "graph", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `Task dependencies: ${edges.length} edge(s)` },
    svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
      svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "currentColor" }))), paths, boxes);
}

function renderTeam(doc) {
  const t = doc.team;
  const nodes = [el("h1", {}, `Team ${t.name || t.team_id}`), el("p", { class: "muted" }, `${t.team_id} · ${t.status} · lead ${t.lead}`)];
  const probe = doc.probe || {};
  if (probe.zombie) nodes.push(el("div", { class: "alert", role: "alert" }, `ZOMBIE: the lead has been silent for ${Math.round((probe.lead_silence_ms || 0) / 60000)} min.`));
  if (probe.problem) nodes.push(el("div", { class: "alert" }, probe.problem));
  if (doc.claude_code) nodes.push(el("div", { class: "note", "data-claude-code": true }, el("strong", {}, "Claude Code team: "), summarize(doc.claude_code)));
  if (session && session.can_write.teams) {
    nodes.push(el("p", {}, el("button", { class: "primary", id: "take-team-checkpoint", onclick: async (e) => {
      e.target.disabled = true;
      try { await api(`teams/${enc(t.team_id)}/checkpoint`, { method: "POST" }); } catch (err) { alert(err.message); }
      e.target.disabled = false;
    } }, "Take a team checkpoint now")));
  }
  nodes.push(el("h2", {}, "Board"), el("div", { class: "board" }, COLUMNS.map(([key, label]) => {
    const items = doc.tasks.filter((x) => x.column === key);
    return el("section", { class: "column", "data-column": key, "aria-label": label },
      el("h3", {}, `${label} (${items.length})`),
      items.map((x) => el("div", { class: `task ${key}`, "data-task": x.task_id },
        el("div", {}, el("strong", {}, x.task_id), " ", x.title),
        el("div", { class: "why" }, x.assigned_to ? `owner ${x.assigned_to}` : "unowned",
          (x.dependencies || []).length ? ` · after ${x.dependencies.join(", ")}` : ""))));
  })));
  nodes.push(el("h2", {}, "Dependencies"), dependencyGraph(doc.tasks, doc.edges));
  nodes.push(el("h2", {}, "Roster"), el("div", { class: "scroll" }, el("table", { "aria-label": "Roster" },
    el("thead", {}, el("tr", {}, ["Teammate", "Role", "Heartbeat", "Last beat", "Clock"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, doc.roster.map((m) => {
      const l = m.liveness || {};
      return el("tr", { "data-mate": m.name }, el("td", {}, m.name), el("td", {}, m.role || "—"),
        el("td", {}, badge(l.class || "unknown", `c-${l.class}`)),
        el("td", {}, l.elapsed_ms === undefined ? "—" : ago(Math.max(0, Math.round(l.elapsed_ms / 1000)))),
        el("td", {}, l.skew ? badge("clock skew", "c-idle") : "ok"));
    })))));
  nodes.push(el("h2", {}, `Mailbox (${doc.mailbox.count || doc.messages.length} messages)`));
  const bySeq = Object.fromEntries(doc.messages.map((m) => [m.seq, m]));
  for (const thread of doc.threads) {
    nodes.push(el("section", { class: "thread", "aria-label": `Thread ${thread.subject}` }, el("h3", {}, thread.subject || "(no subject)"),
      thread.seqs.map((s) => bySeq[s]).filter(Boolean).map((m) => el("div", { class: "msg", "data-seq": m.seq },
        el("div", { class: "meta" }, `#${m.seq} ${when(m.ts)} · ${m.from} → ${m.to === "*" ? "everyone" : m.to} · ${m.type}`),
        el("div", { class: "body" }, m.body),
        el("div", { class: "why" }, m.recipients.map((r) => [r.name, ": ",
          badge(r.acked ? "acked" : r.delivered ? "delivered" : "not delivered", r.acked || r.delivered ? "d-yes" : "d-no"), " "]))))));
  }
  if (!doc.messages.length) nodes.push(el("p", { class: "muted" }, "No messages."));
  nodes.push(el("h2", {}, "Consolidation"), doc.consolidation
    ? el("pre", {}, JSON.stringify(doc.consolidation, null, 2)) : el("p", { class: "muted" }, "Not started."));
  return nodes;
}

function renderClaudeTeam(doc) {
  const t = doc.claude_team;
  const ms = (v) => (v === null || v === undefined ? "—" : when(new Date(v).toISOString()));
  const nodes = [el("h1", {}, `Claude Code team ${t.team_name}`),
    el("p", {}, badge(t.state, `s-${t.state}`), ` lead session ${t.lead_session_id || "—"}`)];
  const waiting = t.messages.filter((m) => m.redeliver_to && m.redelivered_ms === null);
  if (t.state === "recovered" || t.state === "archived" || waiting.length) {
    nodes.push(el("div", { class: "note", role: "status" }, t.state === "archived"
      ? "Its lead died and a new session started fresh: this team was archived and offered to the next lead."
      : `Its lead died; the next session was told what was lost. ${waiting.length} message(s) wait to be delivered again.`));
  }
  const g = t.guardrails || {};
  nodes.push(el("p", { class: "why" }, `Guardrails: check command ${g.check_command || "none"} · keep busy ${g.keep_busy ? "on" : "off"}`));
  nodes.push(el("h2", {}, "Roster"), el("div", { class: "scroll" }, el("table", { "aria-label": "Claude Code roster" },
    el("thead", {}, el("tr", {}, ["Name", "Role", "Spawn prompt", "Transcript"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, t.members.map((m) => el("tr", { "data-member": m.name }, el("td", {}, m.name), el("td", {}, m.role || m.agent_type || "—"),
      el("td", { class: "why" }, String(m.prompt || "").slice(0, 300)), el("td", { class: "why" }, m.transcript || "—")))))));
  nodes.push(el("h2", {}, "Tasks"), el("div", { class: "scroll" }, el("table", { "aria-label": "Claude Code tasks" },
    el("thead", {}, el("tr", {}, ["Task", "Subject", "Status", "Owner", "Blocked by"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, t.tasks.map((x) => el("tr", { "data-cc-task": x.id }, el("td", {}, x.id), el("td", {}, x.subject || ""),
      el("td", {}, x.status || "—"), el("td", {}, x.owner || "—"), el("td", {}, (x.blocked_by || x.blockedBy || []).join(", ") || "—")))))));
  nodes.push(el("h2", {}, "Messages"), t.messages.length ? t.messages.map((m) => el("div", { class: "msg", "data-cc-msg": m.msg_id },
    el("div", { class: "meta" }, `#${m.seq} ${ms(m.sent_ms)} · ${m.sender} → ${m.recipient} · ${m.kind}`),
    el("div", { class: "body" }, m.content || m.summary || ""),
    el("div", { class: "why" }, badge(m.recovery, m.recovery === "delivered" || m.recovery === "delivered again" ? "d-yes" : "d-no"))))
    : el("p", { class: "muted" }, "No messages."));
  return nodes;
}

function renderCheckpoint(doc) {
  return [el("h1", {}, `Checkpoint of ${doc.agent}`), el("p", { class: "muted" }, doc.name),
    el("p", {}, el("a", { href: `#/agent/${enc(doc.agent)}` }, `← agent ${doc.agent}`)),
    el("pre", { "data-checkpoint": doc.name }, JSON.stringify(doc.content, null, 2))];
}

function renderDiff(doc) {
  return [el("h1", {}, `Diff of ${doc.agent}'s checkpoints`),
    el("p", { class: "muted" }, `${doc.older} → ${doc.newer}`),
    el("p", {}, "Changed: ", doc.changed.length ? doc.changed.join(", ") : "nothing"),
    el("p", {}, el("a", { href: `#/agent/${enc(doc.agent)}` }, `← agent ${doc.agent}`)),
    el("pre", { class: "diff" }, doc.diff.map((line) => el("div", {
      class: line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : line.startsWith("@@") ? "hunk" : null }, line || " ")))];
}

// -- routing and live updates ------------------------------------------------------------------------

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "agent" && parts[1]) {
    if (parts[2] === "checkpoint" && parts[3]) return { nav: "agents", load: () => api(`agents/${enc(parts[1])}/checkpoints/${enc(parts[3])}`), render: renderCheckpoint };
    if (parts[2] === "diff" && parts[3] && parts[4]) return { nav: "agents", load: () => api(`agents/${enc(parts[1])}/diff?older=${enc(parts[3])}&newer=${enc(parts[4])}`), render: renderDiff };
    return { nav: "agents", watch: `agent:${parts[1]}`, load: () => api(`agents/${enc(parts[1])}`), render: renderAgent };
  }
  if (parts[0] === "team" && parts[1]) return { nav: "teams", watch: `team:${parts[1]}`, load: () => api(`teams/${enc(parts[1])}`), render: renderTeam };
  if (parts[0] === "claude" && parts[1]) return { nav: "teams", watch: `claude:${parts[1]}`, load: () => api(`claude-teams/${enc(parts[1])}`), render: renderClaudeTeam };
  if (parts[0] === "teams") return { nav: "teams", watch: "overview", load: () => api("overview"), render: (d) => renderOverview(d, "teams") };
  if (parts[0] === "clinic") return { nav: "clinic", watch: "clinic", load: () => api("clinic"), render: renderClinic };
  return { nav: "agents", watch: "overview", load: () => api("overview"), render: (d) => renderOverview(d, "agents") };
}

function show(view, doc) {
  const main = document.getElementById("main");
  const active = document.activeElement;
  const key = active && active !== document.body && active !== main
    ? (active.dataset.key ? `[data-key="${CSS.escape(active.dataset.key)}"]` : active.id ? `#${CSS.escape(active.id)}`
      : active.getAttribute("href") ? `a[href="${CSS.escape(active.getAttribute("href"))}"]` : null) : null;
  const checked = new Set([...main.querySelectorAll("input[name=pick]:checked")].map((x) => x.value));
  const hadPicks = main.querySelector("input[name=pick]") !== null;
  const y = window.scrollY;
  main.replaceChildren(...[view.render(doc)].flat(Infinity).filter((n) => n !== null && n !== undefined && n !== false));
  if (hadPicks) main.querySelectorAll("input[name=pick]").forEach((x) => { x.checked = checked.has(x.value); });
  if (key) {  // the focus stays where it was across a live update
    const again = document.querySelector(key);
    if (again) again.focus({ preventScroll: true });
  }
  window.scrollTo(0, y);
  main.dataset.updated = String(Date.now());
}

function showError(err) {
  const main = document.getElementById("main");
  if (err.status === 401) {
    document.getElementById("token-form").hidden = false;
    main.replaceChildren(el("h1", {}, "A token is needed"), el("p", {}, "This home requires a token: paste one created with ", el("code", {}, "phx token create"), " below, or open the address ", el("code", {}, "phx ui"), " printed."));
    document.getElementById("token-input").focus();
  } else {
    main.replaceChildren(el("h1", {}, err.status === 404 ? "Not found" : "Something went wrong"), el("p", { class: "alert" }, err.message));
  }
}

async function follow(view) {
  if (stream) stream.abort();
  stream = new AbortController();
  const mine = stream;
  let backoff = 1000;
  while (!mine.signal.aborted) {
    try {
      const response = await fetch(`${API}/events?watch=${enc(view.watch)}`, { headers: headers(), signal: mine.signal, cache: "no-store" });
      if (!response.ok || !response.body) throw new HttpError(response.status, response.statusText);
      setLive(true, "live");
      backoff = 1000;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const chunk = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const event = (chunk.match(/^event: (.*)$/m) || [])[1];
          const data = chunk.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
          if (event === "view" && current === view) show(view, JSON.parse(data));
          if (event === "gone") { showError(new HttpError(404, "It is gone.")); return; }
        }
      }
    } catch (err) {
      if (mine.signal.aborted) return;
      if (err.status === 401 || err.status === 404) { showError(err); return; }
    }
    setLive(false, "reconnecting…");
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 15000);
  }
}

async function navigate() {
  const view = route();
  current = view;
  document.querySelectorAll("nav a").forEach((a) => a.setAttribute("aria-current", a.dataset.nav === view.nav ? "page" : "false"));
  if (stream) { stream.abort(); stream = null; }
  try {
    const doc = await view.load();
    if (current !== view) return;
    show(view, doc);
    document.getElementById("main").focus({ preventScroll: true });
    if (view.watch) follow(view); else setLive(false, "not live (a fixed view)");
  } catch (err) {
    showError(err);
  }
}

async function start() {
  const m = location.hash.match(/^#token=([^&]+)/);
  if (m) { sessionStorage.setItem("phx-token", decodeURIComponent(m[1])); history.replaceState(null, "", location.pathname + "#/"); }
  document.getElementById("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem("phx-token", document.getElementById("token-input").value.trim());
    document.getElementById("token-form").hidden = true;
    start();
  });
  try {
    session = await api("session");
    const mode = document.getElementById("mode");
    mode.textContent = session.read_only ? "read-only" : "read-write";
    mode.title = session.token ? `token ${session.token.id}${session.token.label ? " (" + session.token.label + ")" : ""}` : "no token: this home is open to this machine";
    document.getElementById("footer").textContent = `Phoenix ${session.version} · ${session.store} · ${session.home}`;
  } catch (err) {
    showError(err);
    return;
  }
  navigate();
}

document.addEventListener("keydown", (e) => {
  if (e.target.closest("input, textarea") || e.altKey || e.ctrlKey || e.metaKey) return;
  const go = { 1: "#/", 2: "#/teams", 3: "#/clinic" }[e.key];
  if (go) { location.hash = go; return; }
  if (e.key === "j" || e.key === "k") {
    const rows = [...document.querySelectorAll("[data-row]")];
    if (!rows.length) return;
    const at = rows.indexOf(document.activeElement);
    const next = e.key === "j" ? Math.min(rows.length - 1, at + 1) : Math.max(0, at - 1);
    rows[at < 0 ? 0 : next].focus();
    e.preventDefault();
  } else if (e.key === "Enter" && e.target.matches("[data-row]")) {
    const link = e.target.querySelector("a[href]");
    if (link) link.click();
  }
});
window.addEventListener("hashchange", navigate);
start();
