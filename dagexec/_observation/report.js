// dagexec run report: draws the page from the JSON in #report-data (inlined by report.py).
// Vanilla script, nothing fetched. The table draws only the rows on screen and the
// timeline is one canvas, so a 100,000-task run opens as fast as a small one.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("report-data").textContent);
  const S = D.summary, names = D.names, groups = D.groups, outcomes = D.outcomes;
  const states = D.states, T = D.tasks, A = D.attempts;
  const N = names.length, NA = A.length / 8;
  // Times come in microseconds (ints: a shorter file); the page works in seconds.
  for (let k = 0; k < NA; k++) for (let f = 3; f < 7; f++) A[8 * k + f] /= 1e6;
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) =>
    ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  const fmt = (s) => (s < 0 || s !== s) ? "" : s < 1e-3 ? (s * 1e6).toFixed(0) + " \u00b5s"
    : s < 1 ? (s * 1e3).toFixed(1) + " ms" : s < 120 ? s.toFixed(2) + " s"
    : (s / 60).toFixed(1) + " min";
  const COLORS = { "done": "#4e79a7", "failed": "#d32f2f", "retried": "#fb8c00",
    "timed out": "#8e24aa", "abandoned": "#6d4c41", "killed": "#111111",
    "cancelled": "#bdbdbd", "skipped": "#a1887f" };
  const LOADED = "loaded from checkpoint", LOADED_COLOR = "#76b7b2";
  const colorOf = (o) => COLORS[outcomes[o]] || "#78909c";

  // ---- per task, from the attempts: count, first and last attempt
  const nAtt = new Int32Array(N), first = new Int32Array(N).fill(-1);
  const last = new Int32Array(N).fill(-1);
  for (let k = 0; k < NA; k++) {
    const t = A[8 * k];
    nAtt[t]++;
    if (first[t] < 0) first[t] = k;
    if (last[t] < 0 || A[8 * k + 1] >= A[8 * last[t] + 1]) last[t] = k;
  }
  const dur = (t) => last[t] < 0 ? -1 : A[8 * last[t] + 6] - A[8 * last[t] + 5];
  const wait = (t) => first[t] < 0 ? -1 : A[8 * first[t] + 4] - A[8 * first[t] + 3];
  const worker = (t) => last[t] < 0 ? -1 : A[8 * last[t] + 2];
  const needsText = (t) => (D.needs[t] || []).map((n) => n[0] + " " + n[1]).join(", ");
  const logCount = (t) => (D.logs[t] || []).reduce((n, a) => n + a[2].length, 0);
  const children = new Map();
  for (let t = 0; t < N; t++) {
    const p = T.parent[t];
    if (p >= 0) { if (!children.has(p)) children.set(p, []); children.get(p).push(t); }
  }

  // ---- summary and failures
  function card(value, key, cls) {
    return '<div class="card ' + (cls || "") + '"><div class="v">' + esc(value) +
      '</div><div class="k">' + esc(key) + "</div></div>";
  }
  function summary() {
    const c = S.counts;
    $("written").textContent = "written " + S.written + " by dagexec " + S.version;
    let h = card(S.planned, "tasks planned") + card(c.done, "done") +
      card(c.failed, "failed", c.failed ? "failed" : "") + card(c.skipped, "skipped") +
      card(c.cancelled, "cancelled") + card(S.loaded, "loaded from checkpoint") +
      card(S.run, "attempts run") + card(S.retries, "retries") +
      card(S.abandoned, "abandoned attempts") + card(fmt(S.wall), "wall time") +
      card(S.peak_in_flight + " of " + S.effective_cap, "peak in flight") +
      card(S.workers, "workers");
    for (const r of Object.keys(S.resources)) {
      const cap = S.resources[r];
      h += card((S.peak_resources[r] || 0) + " of " + (cap === null ? "\u221e" : cap),
        "peak " + r);
    }
    h += '<p class="sum-line" id="sum-check">' + S.planned + " planned = " + c.done +
      " done + " + c.failed + " failed + " + c.skipped + " skipped + " + c.cancelled +
      " cancelled; of the done, " + S.loaded + " loaded from the checkpoint and " +
      (c.done - S.loaded) + " run" + (S.logged ? "; " + S.logged + " tasks logged" : "") +
      "</p>";
    $("summary").innerHTML = h;
    const failed = [];
    for (let t = 0; t < N; t++) if (D.tracebacks[t] !== undefined) failed.push(t);
    // The first MAX_FAILURES are listed; the table's state filter finds the rest.
    const MAX_FAILURES = 200, listed = failed.slice(0, MAX_FAILURES);
    $("failures").innerHTML = failed.length ? listed.map((t) => {
      return '<li><button type="button" data-t="' + t + '" class="failure">' + esc(names[t]) +
        "</button> <span class=\"muted\">" + esc(D.errors[t]) + "</span></li>";
    }).join("") + (failed.length > listed.length ? '<li class="muted">and ' +
      (failed.length - listed.length) + " more: filter the table by the state failed</li>" : "")
      : '<li class="muted">No task failed.</li>';
    $("failures").addEventListener("click", (e) => {
      const b = e.target.closest("button[data-t]");
      if (b) openDetail(+b.dataset.t, "traceback");
    });
  }

  // ---- timeline: one band per group, attempts packed into lanes, on a canvas
  const canvas = $("timeline"), wrap = $("timeline-wrap"), tip = $("tip");
  const AXIS = 22, HEAD = 16, LH = 12, BAR = 9;
  let end = S.wall;
  for (let k = 0; k < NA; k++) if (A[8 * k + 6] > end) end = A[8 * k + 6];
  end = end || 1;
  let v0 = 0, v1 = end;
  const bands = [];  // {group, y, lanes: [[attempt index sorted by start]]}
  function layout() {
    const by = new Map();
    for (let k = 0; k < NA; k++) {
      const g = T.group[A[8 * k]];
      if (!by.has(g)) by.set(g, []);
      by.get(g).push(k);
    }
    let y = AXIS;
    for (const [g, ks] of by) {
      ks.sort((a, b) => A[8 * a + 5] - A[8 * b + 5]);
      const lanes = [], ends = [];
      for (const k of ks) {
        let l = 0;
        while (l < ends.length && ends[l] > A[8 * k + 5]) l++;
        if (l === ends.length) { lanes.push([]); ends.push(0); }
        lanes[l].push(k);
        ends[l] = A[8 * k + 6];
      }
      bands.push({ group: g, y: y, lanes: lanes });
      y += HEAD + lanes.length * LH + 4;
    }
    return y;
  }
  const height = layout();
  function draw() {
    const dpr = window.devicePixelRatio || 1, W = wrap.clientWidth;
    canvas.width = W * dpr; canvas.height = height * dpr;
    canvas.style.height = height + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, height);
    const span = v1 - v0, x = (t) => (t - v0) / span * W;
    ctx.font = "11px system-ui, sans-serif"; ctx.fillStyle = "#5f6b7a";
    const step = niceStep(span / 8);
    for (let t = Math.ceil(v0 / step) * step; t <= v1; t += step) {
      ctx.fillRect(x(t), 0, 1, AXIS - 6);
      ctx.fillText(fmt(t), x(t) + 3, 11);
    }
    for (const b of bands) {
      ctx.fillStyle = "#1d2330";
      ctx.fillText(groups[b.group] + "  (" + b.lanes.reduce((n, l) => n + l.length, 0) +
        " attempts)", 4, b.y + 11);
      const loaded = groups[b.group] === LOADED;
      b.lanes.forEach((lane, l) => {
        const y = b.y + HEAD + l * LH;
        for (const k of lane) {
          const s = A[8 * k + 5], e = A[8 * k + 6];
          if (e < v0 || s > v1) continue;
          const x0 = x(s), w = Math.max(1, x(e) - x0);
          ctx.fillStyle = loaded ? LOADED_COLOR : colorOf(A[8 * k + 7]);
          ctx.fillRect(x0, y, w, BAR);
        }
      });
    }
    $("zoom-range").textContent = fmt(v0) + " \u2013 " + fmt(v1);
  }
  function niceStep(raw) {
    const p = Math.pow(10, Math.floor(Math.log10(raw || 1e-6))), m = raw / p;
    return (m < 2 ? 2 : m < 5 ? 5 : 10) * p;
  }
  function zoom(factor, at) {
    const span = v1 - v0, c = at === undefined ? v0 + span / 2 : at;
    let n = Math.min(end, Math.max(end * 1e-6, span * factor));
    v0 = Math.max(0, c - (c - v0) * n / span); v1 = Math.min(end, v0 + n);
    v0 = Math.max(0, v1 - n);
    draw();
  }
  function timeAt(px) { return v0 + px / wrap.clientWidth * (v1 - v0); }
  function attemptAt(px, py) {
    for (const b of bands) {
      const l = Math.floor((py - b.y - HEAD) / LH);
      if (l < 0 || l >= b.lanes.length) continue;
      const lane = b.lanes[l], t = timeAt(px), slack = (v1 - v0) / wrap.clientWidth * 2;
      let lo = 0, hi = lane.length - 1, found = -1;
      while (lo <= hi) {
        const mid = (lo + hi) >> 1;
        if (A[8 * lane[mid] + 5] <= t + slack) { found = mid; lo = mid + 1; } else hi = mid - 1;
      }
      if (found >= 0 && A[8 * lane[found] + 6] + slack >= t) return lane[found];
    }
    return -1;
  }
  function timeline() {
    const legend = Object.keys(COLORS).filter((o) => outcomes.includes(o))
      .map((o) => '<span><i class="sw" style="background:' + COLORS[o] + '"></i>' + o + "</span>");
    if (groups.includes(LOADED)) {
      legend.push('<span><i class="sw" style="background:' + LOADED_COLOR + '"></i>loaded</span>');
    }
    $("legend").innerHTML = legend.join("");
    $("zoom-in").onclick = () => zoom(1 / 2);
    $("zoom-out").onclick = () => zoom(2);
    $("zoom-reset").onclick = () => { v0 = 0; v1 = end; draw(); };
    canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = canvas.getBoundingClientRect();
      zoom(e.deltaY > 0 ? 1.25 : 0.8, timeAt(e.clientX - r.left));
    }, { passive: false });
    let drag = null;
    canvas.addEventListener("mousedown", (e) => { drag = { x: e.clientX, v0: v0, v1: v1, moved: false }; });
    window.addEventListener("mouseup", () => { setTimeout(() => { drag = null; }, 0); });
    canvas.addEventListener("mousemove", (e) => {
      const r = canvas.getBoundingClientRect(), px = e.clientX - r.left, py = e.clientY - r.top;
      if (drag && e.buttons) {
        const dt = (e.clientX - drag.x) / wrap.clientWidth * (drag.v1 - drag.v0);
        if (Math.abs(e.clientX - drag.x) > 3) drag.moved = true;
        const n = drag.v1 - drag.v0;
        v0 = Math.min(Math.max(0, drag.v0 - dt), end - n); v1 = v0 + n;
        draw();
        return;
      }
      const k = attemptAt(px, py);
      if (k < 0) { tip.hidden = true; return; }
      const t = A[8 * k];
      tip.textContent = names[t] + "\nattempt " + A[8 * k + 1] + ": " + outcomes[A[8 * k + 7]] +
        "\nworker " + A[8 * k + 2] + ", started " + fmt(A[8 * k + 5]) + ", took " +
        fmt(A[8 * k + 6] - A[8 * k + 5]);
      tip.hidden = false;
      tip.style.left = Math.min(px + 12, wrap.clientWidth - 260) + "px";
      tip.style.top = (py + 14) + "px";
    });
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
    canvas.addEventListener("click", (e) => {
      if (drag && drag.moved) return;
      const r = canvas.getBoundingClientRect();
      const k = attemptAt(e.clientX - r.left, e.clientY - r.top);
      if (k >= 0) openDetail(A[8 * k]);
    });
    window.addEventListener("resize", draw);
    draw();
  }

  // ---- each resource's use over time: what tasks out (dispatched, not ended) held
  function resourcesChart() {
    const byRes = new Map();
    for (let k = 0; k < NA; k++) {
      for (const [r, a] of D.needs[A[8 * k]] || []) {
        if (!byRes.has(r)) byRes.set(r, []);
        byRes.get(r).push([A[8 * k + 4], a], [A[8 * k + 6], -a]);
      }
    }
    if (!byRes.size) {
      $("resources").innerHTML = '<p class="muted">No task of this run needed a resource.</p>';
      return;
    }
    const W = 900, H = 70, cols = new Float64Array(W);
    let h = "";
    for (const [r, ev] of byRes) {
      ev.sort((p, q) => p[0] - q[0] || p[1] - q[1]);
      cols.fill(0);
      let held = 0, peak = 0, i = 0;
      for (let c = 0; c < W; c++) {
        const t1 = (c + 1) / W * end;
        let most = held;
        while (i < ev.length && ev[i][0] < t1) { held += ev[i][1]; most = Math.max(most, held); i++; }
        cols[c] = most; peak = Math.max(peak, most);
      }
      const cap = S.resources[r], top = Math.max(peak, cap !== undefined && cap !== null &&
        isFinite(cap) ? cap : 0) || 1;
      let d = "M0 " + H;
      for (let c = 0; c < W; c++) {
        const y = (H - cols[c] / top * (H - 4)).toFixed(1);
        d += "L" + c + " " + y + "L" + (c + 1) + " " + y;
      }
      d += "L" + W + " " + H + "Z";
      const capLine = cap !== undefined && cap !== null && isFinite(cap)
        ? '<line x1="0" x2="' + W + '" y1="' + (H - cap / top * (H - 4)) + '" y2="' +
          (H - cap / top * (H - 4)) + '" stroke="#d32f2f" stroke-dasharray="4 3"/>' : "";
      h += '<div class="label">' + esc(r) + ": peak " + peak + (capLine ? " of capacity " + cap : "") +
        ", over the run's " + fmt(end) + '</div><svg class="resource" data-resource="' + esc(r) +
        '" viewBox="0 0 ' + W + " " + H + '" width="100%" height="' + H +
        '" preserveAspectRatio="none"><path d="' + d + '" fill="#4e79a7" fill-opacity=".55"/>' +
        capLine + "</svg>";
    }
    $("resources").innerHTML = h;
  }

  // ---- the table: every task, sortable, filterable, a map's items folded under it
  const COLS = [["name", "task"], ["state", "state"], ["attempts", "attempts"],
    ["duration", "duration"], ["wait", "wait"], ["worker", "worker"],
    ["resources", "resources"], ["group", "group"], ["", ""]];
  const KEY = { name: (t) => names[t], state: (t) => T.state[t], attempts: (t) => nAtt[t],
    duration: dur, wait: wait, worker: worker, resources: needsText,
    group: (t) => groups[T.group[t]] || "" };
  let sortKey = "", sortDir = 1, rows = [];
  const open = new Set(), RH = 24;
  const scroll = $("table-scroll"), spacer = $("table-spacer"), body = $("table-rows");
  function matches(t, text, state) {
    if (state !== "" && states[T.state[t]] !== state) return false;
    if (!text) return true;
    const hay = (names[t] + " " + (groups[T.group[t]] || "") + " w" + worker(t) + " " +
      states[T.state[t]] + " " + needsText(t)).toLowerCase();
    return hay.includes(text);
  }
  function sorted(list) {
    if (!sortKey) return list;
    const f = KEY[sortKey];
    return list.map((t) => [f(t), t]).sort((p, q) =>
      (p[0] < q[0] ? -1 : p[0] > q[0] ? 1 : p[1] - q[1]) * sortDir).map((p) => p[1]);
  }
  function rebuild() {
    const text = $("filter").value.trim().toLowerCase(), state = $("state-filter").value;
    const all = [];
    if (text || state) {
      for (let t = 0; t < N; t++) if (matches(t, text, state)) all.push(t);
      rows = sorted(all);
    } else {
      for (let t = 0; t < N; t++) if (T.parent[t] < 0) all.push(t);
      rows = [];
      for (const t of sorted(all)) {
        rows.push(t);
        if (open.has(t) && children.has(t)) rows.push(...sorted(children.get(t)));
      }
    }
    $("shown").textContent = "showing " + rows.length + " of " + N + " tasks" +
      (text || state ? " (filtered; map items listed on their own)" : "");
    spacer.style.height = rows.length * RH + "px";
    paint();
  }
  function rowHtml(t) {
    const kids = children.get(t), item = T.parent[t] >= 0, st = states[T.state[t]];
    const fold = kids ? '<button type="button" class="fold" data-act="fold" aria-label="fold">' +
      (open.has(t) ? "\u25be" : "\u25b8") + "</button>" : "";
    const logs = D.logs[t] ? '<button type="button" class="link" data-act="logs">logs (' +
      logCount(t) + ")</button> " : "";
    const tb = D.tracebacks[t] !== undefined
      ? '<button type="button" class="link" data-act="traceback">traceback</button> ' : "";
    return '<div class="row' + (item ? " item" : "") + '" data-t="' + t + '"><span title="' +
      esc(names[t]) + '">' + fold + esc(names[t]) + (kids ? ' <span class="muted">(' +
      kids.length + " items)</span>" : "") + '</span><span class="state-' + st + '">' + st +
      "</span><span>" + nAtt[t] + "</span><span>" + fmt(dur(t)) + "</span><span>" + fmt(wait(t)) +
      "</span><span>" + (worker(t) < 0 ? "" : worker(t)) + "</span><span>" + esc(needsText(t)) +
      "</span><span>" + esc(groups[T.group[t]] || "") + "</span><span>" + tb + logs + "</span></div>";
  }
  function paint() {
    const from = Math.max(0, Math.floor(scroll.scrollTop / RH) - 5);
    const to = Math.min(rows.length, from + Math.ceil(scroll.clientHeight / RH) + 10);
    let h = "";
    for (let i = from; i < to; i++) h += rowHtml(rows[i]);
    body.style.transform = "translateY(" + from * RH + "px)";
    body.innerHTML = h;
  }
  function table() {
    $("table-head").innerHTML = COLS.map((c) => '<span data-key="' + c[0] + '">' + c[1] +
      "</span>").join("");
    $("table-head").addEventListener("click", (e) => {
      const k = e.target.closest("span[data-key]");
      if (!k || !k.dataset.key) return;
      if (sortKey === k.dataset.key) sortDir = -sortDir; else { sortKey = k.dataset.key; sortDir = 1; }
      for (const s of $("table-head").children) {
        s.textContent = COLS.find((c) => c[0] === s.dataset.key)[1] +
          (s.dataset.key === sortKey ? (sortDir > 0 ? " \u25b2" : " \u25bc") : "");
      }
      rebuild();
    });
    $("state-filter").innerHTML += states.map((s) => '<option value="' + s + '">' + s +
      "</option>").join("");
    $("filter").addEventListener("input", rebuild);
    $("state-filter").addEventListener("change", rebuild);
    scroll.addEventListener("scroll", paint);
    body.addEventListener("click", (e) => {
      const row = e.target.closest(".row[data-t]");
      if (!row) return;
      const t = +row.dataset.t, act = e.target.closest("[data-act]");
      if (act && act.dataset.act === "fold") {
        if (open.has(t)) open.delete(t); else open.add(t);
        rebuild();
      } else openDetail(t, act ? act.dataset.act : "");
    });
    rebuild();
  }

  // ---- one task: its attempts, its traceback, its logs
  function openDetail(t, focus) {
    const st = states[T.state[t]], p = T.parent[t];
    let h = "<h3>" + esc(names[t]) + '</h3><p><span class="state-' + st + '">' + st +
      "</span> \u00b7 group " + esc(groups[T.group[t]] || "") +
      (p >= 0 ? " \u00b7 item of map " + esc(names[p]) : "") +
      (children.has(t) ? " \u00b7 a map of " + children.get(t).length + " items" : "") +
      (needsText(t) ? " \u00b7 needs " + esc(needsText(t)) : "") + "</p>";
    const mine = [];
    for (let k = 0; k < NA; k++) if (A[8 * k] === t) mine.push(k);
    h += "<h4>Attempts</h4>" + (mine.length ? '<table class="attempts"><tr><th>#</th>' +
      "<th>outcome</th><th>worker</th><th>ready</th><th>started</th><th>took</th></tr>" +
      mine.map((k) => "<tr><td>" + A[8 * k + 1] + "</td><td>" + esc(outcomes[A[8 * k + 7]]) +
        "</td><td>" + A[8 * k + 2] + "</td><td>" + fmt(A[8 * k + 3]) + "</td><td>" +
        fmt(A[8 * k + 5]) + "</td><td>" + fmt(A[8 * k + 6] - A[8 * k + 5]) + "</td></tr>")
        .join("") + "</table>" : '<p class="muted">It never ran (' + st + ").</p>");
    if (D.tracebacks[t] !== undefined) {
      h += '<h4>Traceback</h4><pre id="detail-traceback">' + esc(D.tracebacks[t]) + "</pre>";
    }
    h += '<h4>Logs</h4><div id="detail-logs">';
    const logs = D.logs[t];
    if (!logs) {
      h += '<p class="muted">' + (S.logs_captured ? "This task logged nothing that was captured."
        : "No logs were captured: run with logs=True (the command line: --logs).") + "</p>";
    } else {
      for (const [n, dropped, recs] of logs) {
        h += '<p class="muted">attempt ' + n + ": " + recs.length + (recs.length === 1 ? " record" : " records") +
          (dropped ? ", " + dropped + " more dropped (the per-attempt cap)" : "") + "</p>" +
          '<table class="logs"><tr><th>time</th><th>level</th><th>logger</th><th>message</th></tr>' +
          recs.map((r) => "<tr><td>" + esc(r[0]) + '</td><td class="lvl-' + esc(r[1]) + '">' +
            esc(r[1]) + "</td><td>" + esc(r[2]) + '</td><td class="msg">' + esc(r[3]) +
            "</td></tr>").join("") + "</table>";
      }
    }
    h += "</div>";
    $("detail-body").innerHTML = h;
    $("detail").hidden = false;
    $("detail").dataset.task = String(t);
    const target = focus === "traceback" ? $("detail-traceback") : focus === "logs"
      ? $("detail-logs") : null;
    if (target) target.scrollIntoView({ block: "start" });
    else $("detail").scrollTop = 0;
  }
  $("detail-close").onclick = () => { $("detail").hidden = true; };
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") $("detail").hidden = true; });

  summary();
  timeline();
  resourcesChart();
  table();
  // Where task t's last attempt is drawn, in the window's coordinates (for tests).
  function barOf(t) {
    for (const b of bands) {
      for (let l = 0; l < b.lanes.length; l++) {
        const k = b.lanes[l].indexOf(last[t]);
        if (k < 0) continue;
        const r = canvas.getBoundingClientRect(), W = wrap.clientWidth;
        const s = Math.max(A[8 * last[t] + 5], v0), e = Math.min(A[8 * last[t] + 6], v1);
        return [r.left + ((s + e) / 2 - v0) / (v1 - v0) * W, r.top + b.y + HEAD + l * LH + BAR / 2];
      }
    }
    return null;
  }
  window.dagexecReport = { readyAt: performance.now(), openDetail: openDetail, barOf: barOf };
  document.body.dataset.ready = "1";
})();
