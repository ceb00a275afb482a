// agentgraphs run report: renders lazily from the JSON embedded above (no network).
// Only the visible table rows and the opened parts of one rollout exist in the DOM.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const data = (id) => JSON.parse($(id).textContent);
  const INDEX = data("ag-index"), SUMMARY = data("ag-summary"), ROLES = data("ag-roles"), VOCAB = data("ag-vocab");
  const RAW = $("ag-rollouts").textContent;
  const OFFSETS = [0];
  for (let i = RAW.indexOf("\n"); i >= 0; i = RAW.indexOf("\n", i + 1)) OFFSETS.push(i + 1);
  const ROW_H = 26, HEAD = 256, TAIL = 384, OUT_HEAD = 2000, CHUNK = 2000, PATH_CHIPS = 300;
  const cache = new Map();

  function rollout(pos) {
    let r = cache.get(pos);
    if (!r) {
      const end = pos + 1 < OFFSETS.length ? OFFSETS[pos + 1] - 1 : RAW.length;
      r = JSON.parse(RAW.slice(OFFSETS[pos], end));
      cache.set(pos, r);
      if (cache.size > 8) cache.delete(cache.keys().next().value);
    }
    return r;
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  const fmt = (x, d) => (x === null || x === undefined || Number.isNaN(x)) ? "" : (typeof x === "number" ? x.toFixed(d) : String(x));
  // metrics come as [label, value] pairs in display order (the strict metric first: report.metric_items)
  const metricsText = (m) => (Array.isArray(m) ? m : Object.entries(m || {})).map(([k, v]) => k + "=" + (typeof v === "number" ? +v.toFixed(4) : v)).join(", ");
  const statusBadge = (s) => el("span", "status " + s, s);

  // ---------------------------------------------------------------- summary
  function renderSummary() {
    const s = SUMMARY, box = $("run-summary");
    const parts = [["agent", s.agent], ["engine", s.engine], ["rollouts", INDEX.length],
      ["by status", Object.entries(s.by_status || {}).map(([k, v]) => k + " " + v).join(", ")],
      ["metrics", metricsText(s.metrics)],  // the headline first: a strict metric, not its lenient sibling
      ["mean reward", typeof s.mean_reward === "number" ? s.mean_reward.toFixed(4) : null],
      ["LLM calls", s.llm_calls], ["wall", s.wall_s ? s.wall_s + " s" : null]];
    for (const [k, v] of parts) {
      if (v === undefined || v === null || v === "") continue;
      box.append(el("b", null, k + ": "), document.createTextNode(v + "   "));
    }
  }

  // ---------------------------------------------------------------- table (virtualised)
  let view = INDEX.slice(), sortKey = null, sortDir = 1, selected = null;
  const body = $("table-body"), spacer = $("table-spacer");

  function sortValue(row, key) {
    const v = key === "metrics" ? metricsText(row.metrics) : row[key];
    return v === null || v === undefined ? null : v;
  }
  function applyView() {
    const want = $("status-filter").value;
    view = INDEX.filter((r) => !want || r.status === want);
    if (sortKey) {
      view.sort((a, b) => {
        const x = sortValue(a, sortKey), y = sortValue(b, sortKey);
        if (x === y) return a.pos - b.pos;
        if (x === null) return 1;
        if (y === null) return -1;
        return (x < y ? -1 : 1) * sortDir;
      });
    }
    $("row-count").textContent = view.length + " of " + INDEX.length + " rollouts";
    spacer.style.height = (view.length * ROW_H) + "px";
    body.style.height = Math.max(2 * ROW_H, Math.min(view.length * ROW_H + 4, 420)) + "px";
    body.scrollTop = 0;
    renderRows();
  }
  function renderRows() {
    for (const old of body.querySelectorAll(".row")) old.remove();
    const first = Math.max(0, Math.floor(body.scrollTop / ROW_H) - 4);
    const last = Math.min(view.length, first + Math.ceil((body.clientHeight || 420) / ROW_H) + 8);
    const frag = document.createDocumentFragment();
    for (let i = first; i < last; i++) {
      const r = view[i], row = el("div", "grid row" + (r.pos === selected ? " selected" : ""));
      row.style.top = (i * ROW_H) + "px";
      row.dataset.pos = r.pos;
      row.setAttribute("role", "row");
      const cells = [r.index ?? r.pos, null, fmt(r.reward, 3), metricsText(r.metrics), r.turns, r.trained, r.retries, r.path, fmt(r.time_s, 2)];
      cells.forEach((c, k) => {
        const cell = el("div", "c-" + k);
        if (k === 1) {
          cell.append(statusBadge(r.status));
          if (r.breaches) cell.append(el("span", "breach-badge", "\u26a0" + r.breaches));
        } else cell.textContent = c === undefined ? "" : c;
        if (k === 7 || k === 3) cell.title = k === 7 ? r.path : metricsText(r.metrics);
        if (k === 1) cell.title = (r.breaches ? r.breaches + " invariant breach(es) (agentgraphs check); " : "") + (r.reason || "");
        row.append(cell);
      });
      row.addEventListener("click", () => safeSelect(r.pos));
      frag.append(row);
    }
    body.append(frag);
  }
  function setupTable() {
    const counts = {};
    for (const r of INDEX) counts[r.status] = (counts[r.status] || 0) + 1;
    for (const s of Object.keys(counts).sort()) {
      const o = el("option", null, s + " (" + counts[s] + ")");
      o.value = s;
      $("status-filter").append(o);
    }
    $("status-filter").addEventListener("change", applyView);
    for (const h of $("table-head").children) {
      h.addEventListener("click", () => {
        const key = h.dataset.key;
        sortDir = sortKey === key ? -sortDir : 1;
        sortKey = key;
        for (const o of $("table-head").children) o.classList.remove("asc", "desc");
        h.classList.add(sortDir > 0 ? "asc" : "desc");
        applyView();
      });
    }
    let pending = false;
    body.addEventListener("scroll", () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => { pending = false; renderRows(); });
    });
  }

  // ---------------------------------------------------------------- token views
  function expand(runs) {
    const out = [];
    for (const [v, n] of runs) for (let i = 0; i < n; i++) out.push(v);
    return out;
  }
  // A view: parallel arrays over positions: ids, roles, elp (engine log-prob), tlp (trainer log-prob),
  // eid (the engine's id where an engine call produced the position), and bad: position -> breach text.
  function seqView(r, s) {
    const seq = r.seqs[s];
    if (seq._view) return seq._view;
    const n = seq.t.length, start = n - seq.n;
    const elp = new Array(n).fill(null), tlp = new Array(n).fill(null), eid = new Array(n).fill(null);
    for (let j = 0; j < seq.lp.length && start + j < n; j++) tlp[start + j] = seq.lp[j];
    for (const [pos, k, off, len] of seq.own) {  // which engine call produced which positions (the audit's)
      const t = r.turns[k];
      for (let j = 0; j < len; j++) { elp[pos + j] = t.ol[off + j]; eid[pos + j] = t.o[off + j]; }
    }
    const bad = {};
    for (const [pos, kind, detail] of seq.b) note(bad, pos, kind + ": " + detail);
    for (const [k, diffs, count] of seq.pd || []) {  // every position of a breached prompt, outlined
      const who = "turn " + k + " (" + (r.turns[k] ? r.turns[k].node : "?") + ")";
      for (const [pos, id] of diffs) {
        if (pos < n) note(bad, pos, "prompt: " + who + "'s engine saw id " + id + " here");
      }
      if (count > diffs.length && diffs.length) {
        note(bad, diffs[0][0], "prompt: " + (count - diffs.length) + " more positions of " + who +
          "'s prompt differ (not outlined)");
      }
    }
    seq._view = { ids: seq.t, roles: expand(seq.r), elp, tlp, eid, bad, start };
    return seq._view;
  }
  function note(bad, pos, text) { bad[pos] = (bad[pos] ? bad[pos] + "; " : "") + text; }
  function turnView(r, k) {
    const t = r.turns[k];
    if (t._view) return t._view;
    const end = t.pl + t.o.length;
    let v;
    if (t.seq !== null && t.seq !== undefined) {
      const s = seqView(r, t.seq);
      v = { ids: s.ids.slice(0, end), roles: s.roles.slice(0, end), elp: s.elp.slice(0, end), tlp: s.tlp.slice(0, end),
            eid: s.eid.slice(0, end), bad: s.bad };
      if (t.ep) {  // a prompt breach: show what the engine saw, each position the trainer has otherwise outlined
        v.bad = Object.assign({}, s.bad);
        for (let i = 0; i < t.pl; i++) {
          if (i < s.ids.length && s.ids[i] === t.ep[i]) continue;
          v.bad[i] = "prompt: the engine saw this token; the trainer's sequence has " +
            (i < s.ids.length ? "id " + s.ids[i] : "no token") + " here" + (s.bad[i] ? "; " + s.bad[i] : "");
          v.ids[i] = t.ep[i];
        }
      }
    } else {
      const none = { ids: [], roles: [], elp: [], tlp: [], eid: [], bad: {} };
      const base = t.base === null || t.base === undefined ? none : turnView(r, t.base);
      const blank = new Array(t.p.length + t.o.length).fill(null);
      v = {  // the earlier turn's positions keep what it had (trained tokens keep their trainer log-prob)
        ids: base.ids.concat(t.p, t.o),
        roles: base.roles.concat(expand(t.pr), expand(t.or)),
        elp: base.elp.concat(new Array(t.p.length).fill(null), t.ol),
        tlp: base.tlp.concat(blank),
        eid: base.eid.concat(new Array(t.p.length).fill(null), t.o),
        bad: base.bad,
      };
      for (let j = 0; j < t.ol.length; j++) v.elp[t.pl + j] = t.ol[j];
    }
    t._view = v;
    return v;
  }

  function tokenText(s) {
    if (s === undefined) return "\u2047";
    if (s === "") return "\u2205";
    return s.replace(/\n/g, "\u21b5\n").replace(/\t/g, "\u2192\t");
  }
  function tokSpan(v, i) {
    const id = v.ids[i], role = ROLES[v.roles[i]] || "prompt", s = VOCAB[id];
    const sp = el("span", "tok " + role);
    sp.textContent = tokenText(s);
    let title = "id " + id + " \u00b7 " + role + " \u00b7 position " + i;
    const e = v.elp[i], t = v.tlp[i], engineId = v.eid[i], has = (x) => x !== null && x !== undefined;
    if (has(e)) title += " \u00b7 log-prob " + e.toFixed(6);
    if (has(t) && (role === "trained" || t !== 0)) title += " \u00b7 trainer log-prob " + t.toFixed(6);
    if (has(engineId) && engineId !== id) title += " \u00b7 the engine returned id " + engineId;
    // outlined red: whatever `agentgraphs check` reports here, and any trained token that is not exactly an
    // engine's output (another id, another log-prob, or no engine call at all)
    const wrong = v.bad[i] !== undefined || (role !== "trained" && t) ||
      (role === "trained" && (!has(e) || t !== e || engineId !== id));
    if (wrong) sp.classList.add("mismatch");
    if (v.bad[i] !== undefined) title += " \u00b7 BREACH " + v.bad[i];
    else if (role === "trained" && !has(e)) title += " \u00b7 no engine call produced this trained token";
    if (s && s.length > 2 && s[0] === "<" && s[s.length - 1] === ">") sp.classList.add("special");
    sp.title = title;
    return sp;
  }
  function spans(v, from, to) {
    const frag = document.createDocumentFragment();
    for (let i = from; i < to; i++) frag.append(tokSpan(v, i));
    return frag;
  }
  // Tokens [from, to): the first `head` and last `tail` shown, the middle behind "show N more tokens".
  function renderRange(box, v, from, to, head, tail) {
    if (to - from <= head + tail + 64) { box.append(spans(v, from, to)); return; }
    box.append(spans(v, from, from + head));
    let next = from + head;
    const stop = to - tail;
    const btn = el("button", "more", "show " + (stop - next) + " more tokens");
    btn.addEventListener("click", () => {
      const upto = Math.min(next + CHUNK, stop);
      box.insertBefore(spans(v, next, upto), btn);
      next = upto;
      if (next >= stop) btn.remove(); else btn.textContent = "show " + (stop - next) + " more tokens";
    });
    box.append(btn, spans(v, stop, to));
  }
  function tokenBlock(title, v, from, to, head, tail) {
    const wrap = el("div");
    wrap.append(el("div", "part-title", title + " (" + (to - from) + " tokens)"));
    const box = el("div", "tokens");
    renderRange(box, v, from, to, head, tail);
    wrap.append(box);
    return wrap;
  }
  function roleCounts(roles, from, to) {
    const c = {};
    for (let i = from; i < to; i++) { const n = ROLES[roles[i]]; c[n] = (c[n] || 0) + 1; }
    const line = el("div", "counts hint");
    for (const n of ROLES) if (c[n]) line.append(el("span", null, n + " " + c[n]));
    return line;
  }

  // ---------------------------------------------------------------- one rollout
  function lazyDetails(cls, summaryText, build, open) {
    const d = el("details", cls);
    d.append(el("summary", null, summaryText));
    let built = false;
    d.addEventListener("toggle", () => {
      if (d.open && !built) { built = true; const b = el("div", "body"); build(b); d.append(b); }
    });
    if (open) d.open = true;
    return d;
  }
  function fact(dl, k, v, pre) {
    if (v === undefined || v === null || v === "") return;
    dl.append(el("dt", null, k));
    const dd = el("dd", null, typeof v === "string" ? v : JSON.stringify(v, null, pre ? 2 : 0));
    if (k === "reward") dd.id = "detail-reward";
    dl.append(dd);
  }
  function select(pos) {
    selected = pos;
    for (const row of body.querySelectorAll(".row")) row.classList.toggle("selected", Number(row.dataset.pos) === pos);
    const r = rollout(pos), box = $("detail");
    box.replaceChildren();
    box.dataset.pos = pos;
    const h = el("h2", null, "Rollout " + (r.index ?? pos) + " (line " + r.line + ") ");
    h.append(statusBadge(r.status));
    box.append(h);
    const dl = el("dl", "facts");
    fact(dl, "reason", r.reason); fact(dl, "reward", r.reward); fact(dl, "metrics", metricsText(r.metrics));
    fact(dl, "answer", r.answer); fact(dl, "label", r.label); fact(dl, "time (s)", r.time_s);
    fact(dl, "layout", r.layout); fact(dl, "weight versions", (r.weight_versions || []).join(", "));
    fact(dl, "trace summary", r.summary);
    if (r.breaches) {
      const b = el("dd", "breaches", r.breaches + " (agentgraphs check), outlined in red" +
        (r.other_breaches.length ? ":\n" + r.other_breaches.join("\n") : ""));
      b.id = "detail-breaches";
      dl.append(el("dt", null, "invariant breaches"), b);
    }
    box.append(dl);
    if (r.prompt !== null && r.prompt !== undefined) {
      box.append(lazyDetails("seq", "input prompt", (b) => b.append(el("pre", "tokens", typeof r.prompt === "string" ? r.prompt : JSON.stringify(r.prompt, null, 2)))));
    }
    if (r.error) box.append(lazyDetails("seq", "error", (b) => b.append(el("pre", "err", r.error))));

    if (r.steps && r.steps.length) {
      // every node that ran, each step with the LLM calls it made (from the trace), linked to the turns
      box.append(el("h3", null, "Graph path: every node in execution order (" + r.path.length + " steps)"));
      const gp = el("div", "timeline graph-path");
      r.steps.slice(0, PATH_CHIPS).forEach((step, i) => {
        if (i) gp.append(el("span", "arrow", "\u2192"));
        const calls = step.calls.filter((c) => r.turns[c]), missing = (step.missing || []).concat(
          step.calls.filter((c) => !r.turns[c]));  // path_turns of an edited trace may name turns it lacks
        const trained = calls.some((c) => r.turns[c].trainable);
        const label = step.node + (step.steps > 1 ? " (" + step.steps + " steps)" : "") +
          (calls.length ? " \u00d7" + calls.length : "") + (step.dropped ? " +" + step.dropped + " dropped" : "") +
          (missing.length ? " +" + missing.length + " missing" : "");
        const chip = el("button", "node-chip step" + (trained ? " trainable" : "") +
          (calls.length || step.dropped || missing.length ? "" : " no-llm") + (step.dropped ? " dropped" : "") +
          (missing.length ? " missing" : ""), label);
        const notes = [];
        if (missing.length) {
          notes.push("BREACH: the trace records call(s) " + missing.join(", ") + " of this step, but holds no such " +
            "turn (an edited traces.jsonl: see the invariant breaches)");
        }
        if (calls.length) notes.push("LLM calls: turns " + calls.join(", "));
        if (step.dropped) notes.push(step.dropped + " LLM call(s) whose turn the graph dropped from its final state: never trained");
        if (step.steps > 1) notes.push("the trace does not say which of these steps made which call");
        chip.title = notes.length ? notes.join("; ") : "no LLM call";
        if (calls.length) chip.addEventListener("click", () => { const d = $("turn-" + calls[0]); d.open = true; d.scrollIntoView({ block: "start" }); });
        gp.append(chip);
      });
      if (r.steps.length > PATH_CHIPS) gp.append(el("span", "arrow", "\u2026 " + (r.steps.length - PATH_CHIPS) + " more steps"));
      box.append(gp);
    }
    box.append(el("h3", null, "LLM nodes in call order (" + r.turns.length + " calls)"));
    const tl = el("div", "timeline");
    r.turns.forEach((t, k) => {
      if (k) tl.append(el("span", "arrow", "\u2192"));
      const chip = el("button", "node-chip" + (t.trainable ? " trainable" : "") + " " + (t.finish || ""), k + " " + t.node);
      chip.title = "finish " + t.finish + ", retries " + t.retries + ", conversation " + (t.conv || "(none)");
      chip.addEventListener("click", () => { const d = $("turn-" + k); d.open = true; d.scrollIntoView({ block: "start" }); });
      tl.append(chip);
    });
    box.append(tl);

    box.append(el("h3", null, "LLM turns"));
    r.turns.forEach((t, k) => {
      const label = "#" + k + " " + t.node + " \u00b7 conversation " + (t.conv || "(none)") + " \u00b7 finish " + t.finish +
        " \u00b7 retries " + t.retries + " \u00b7 T " + (t.T === null ? "the server's" : t.T) + " \u00b7 " + (t.trainable ? "trainable" : "not trainable") +
        " \u00b7 prompt " + t.pl + " + output " + t.o.length + " tokens \u00b7 " + t.engine;
      const d = lazyDetails("turn", label, (b) => {
        if (!t.o.length && t.text) { b.append(el("div", "part-title", "text (a text engine: no token ids)"), el("pre", "tokens", t.text)); return; }
        const v = turnView(r, k);
        b.append(roleCounts(v.roles, 0, v.ids.length));
        b.append(tokenBlock("prompt", v, 0, t.pl, HEAD, TAIL));
        b.append(tokenBlock("output \u00b7 finish " + t.finish, v, t.pl, t.pl + t.o.length, OUT_HEAD, TAIL));
      }, false);
      d.id = "turn-" + k;
      box.append(d);
    });

    box.append(el("h3", null, "Training sequences, as the trainer sees them (" + r.seqs.length + ")"));
    r.seqs.forEach((s, k) => {
      const trained = s.m.reduce((a, [m, n]) => a + (m ? n : 0), 0);
      const label = "sequence " + k + ": " + s.t.length + " tokens = prompt " + (s.t.length - s.n) + " + response " + s.n +
        " \u00b7 trained " + trained + " \u00b7 turns [" + s.turns.join(", ") + "]" +
        (s.t.length === 2 && s.n === 1 && !trained ? " \u00b7 placeholder: nothing to train (slime needs a non-empty sequence)" : "");
      const d = lazyDetails("seq", label, (b) => {
        const v = seqView(r, k);
        b.append(roleCounts(v.roles, 0, v.ids.length));
        b.append(tokenBlock("prompt part (masked, not trained)", v, 0, v.start, HEAD, TAIL));
        b.append(tokenBlock("response: loss mask 1 = trained", v, v.start, v.ids.length, OUT_HEAD, TAIL));
      }, k === 0);
      d.id = "seq-" + k;
      box.append(d);
    });
    if (!r.seqs.length) box.append(el("p", "hint", "no training sequences"));
  }

  function safeSelect(pos) {  // one rollout the page cannot render must not take the page down
    try { select(pos); } catch (err) {
      $("detail").append(el("pre", "err", "the report could not render the rest of this rollout: " + err));
    }
  }
  renderSummary();
  setupTable();
  applyView();
  if (view.length) safeSelect(view[0].pos);
  window.agentgraphsViewer = { select: safeSelect, applyView, renderRows };  // for automation (tests, benchmarks)
  document.body.dataset.readyMs = String(Math.round(performance.now()));
  document.body.dataset.ready = "1";
})();
