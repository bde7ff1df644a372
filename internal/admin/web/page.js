// ebbfs status page: polls /v1/monitor and /v1/history and updates the
// page in place. Self-contained: no library, no outside resource.
"use strict";
(function () {
  var interval = 3000;
  var m = /[?&]interval=(\d+)/.exec(location.search);
  if (m) interval = Math.max(500, parseInt(m[1], 10));
  var prev = null;

  function $(id) { return document.getElementById(id); }
  function setText(id, s) { var e = $(id); if (e && e.textContent !== s) e.textContent = s; }
  function setBytes(id, n) {
    var e = $(id); if (!e) return;
    e.setAttribute("data-bytes", String(n));
    setText(id, human(n));
  }
  function human(n) {
    if (n === undefined || n === null) return "–";
    var u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], i = 0, v = n;
    while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (i === 0 ? String(v) : v.toFixed(1)) + " " + u[i];
  }
  function dur(sec) {
    if (sec === null || sec === undefined || isNaN(sec)) return "–";
    if (sec < 1) return (sec * 1000).toFixed(sec < 0.01 ? 2 : 0) + " ms";
    if (sec < 120) return sec.toFixed(1) + " s";
    if (sec < 7200) return Math.round(sec / 60) + " min";
    if (sec < 172800) return (sec / 3600).toFixed(1) + " h";
    return Math.round(sec / 86400) + " d";
  }
  function when(t) {
    if (!t || t.indexOf("0001-") === 0) return "never";
    var d = (Date.parse(t) - Date.now()) / 1000;
    return d >= 0 ? "in " + dur(d) : dur(-d) + " ago";
  }
  function rate(cur, old, f) {
    if (!old) return 0;
    var dt = (Date.parse(cur.at) - Date.parse(old.at)) / 1000;
    if (dt <= 0) return 0;
    return Math.max(0, (f(cur) - f(old)) / dt);
  }
  function opSum(ops, names, field) {
    var s = 0;
    if (!ops) return 0;
    for (var i = 0; i < names.length; i++) { var o = ops[names[i]]; if (o) s += o[field]; }
    return s;
  }
  function io(st, field, names) { return opSum(st.fuse, names, field) + opSum(st.nbd_ops, names, field); }
  function quantile(h, q) {
    if (!h || !h.count) return NaN;
    var rank = q * h.count, pc = 0, pb = 0;
    for (var i = 0; i < h.counts.length; i++) {
      var c = h.counts[i];
      if (c >= rank) { var inb = c - pc; return inb ? pb + (h.bounds[i] - pb) * (rank - pc) / inb : h.bounds[i]; }
      pc = c; pb = h.bounds[i];
    }
    return h.bounds[h.bounds.length - 1];
  }
  function histSub(a, b) {
    if (!b || !a || a.counts.length !== b.counts.length) return a;
    var out = { bounds: a.bounds, counts: [], count: a.count - b.count, sum: a.sum - b.sum };
    for (var i = 0; i < a.counts.length; i++) out.counts.push(a.counts[i] - b.counts[i]);
    return out;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svg(tag, attrs, text) {
    var e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function renderHeader(st) {
    setText("role", st.role + (st.checkpoint ? " " + st.checkpoint : ""));
    $("role").className = "badge" + (st.role === "writer" ? "" : " ro");
    setText("version", st.version);
    setText("uptime", dur(st.uptime_seconds));
    setText("mountpoint", st.mountpoint);
    setText("store", st.store);
    var lag = $("lag-row");
    if (st.replica) {
      lag.hidden = false;
      setText("lag", dur(st.replica.lag_seconds) + " (journal " + st.replica.served_seq +
        (st.replica.error ? "; store unreachable: " + st.replica.error : "") + ")");
    } else lag.hidden = true;
    var ha = st.health && st.health.ha;
    if (ha && (ha.role === "standby" || ha.failovers || (ha.standbys && ha.standbys.length))) {
      var t = st.replica ? $("lag").textContent : "";
      lag.hidden = false;
      if (ha.role === "standby") t += (t ? "; " : "") + "standby, writer seen " + dur(ha.since_sign_of_life_seconds || 0) +
        " ago" + (ha.armed ? ", takes over at " + dur(ha.takeover_after_seconds) : ", not armed yet");
      if (ha.standbys && ha.standbys.length) t += (t ? "; " : "") + ha.standbys.length + " standby(s), heartbeat every " + dur(ha.heartbeat_every_seconds);
      if (ha.failovers) t += (t ? "; " : "") + "took over at " + ha.promoted;
      setText("lag", t);
    }
  }

  // The damage alarm: files whose data in the store fails authentication.
  function renderDamage(st) {
    var box = $("damage"), files = st.damage || [], frames = (st.cache && st.cache.Corrupt) || 0;
    if (!files.length && !frames) { box.hidden = true; return; }
    box.hidden = false;
    box.setAttribute("data-files", String(files.length));
    clear(box);
    box.appendChild(el("strong", {}, "DAMAGE: " + (files.length ? files.length + " file(s)" : frames + " frame(s)") +
      " fail authentication; reads of the damaged ranges return EIO. List all with ebbfs fsck --verify-data --list-damaged"));
    var ul = el("ul", {});
    files.forEach(function (d) {
      var name = d.paths && d.paths.length ? d.paths.join(", ") : "inode " + d.ino + " (unlinked)";
      var ranges = (d.ranges || []).map(function (r) { return "[" + r.offset + "," + (r.offset + r.length) + ")"; }).join(" ");
      ul.appendChild(el("li", { "class": "damaged" }, name + " bytes " + ranges));
    });
    box.appendChild(ul);
  }

  function renderSpace(st) {
    var sp = st.space, box = $("footprint");
    if (!sp) { setText("fp-note", st.role === "writer" ? "starting…" : "the writer's page shows the footprint"); return; }
    setText("fp-note", st.space_error ? "error: " + st.space_error : "");
    var pinned = 0;
    if (sp.Pinned) for (var k in sp.Pinned) pinned = Math.max(pinned, sp.Pinned[k]);
    var deadNot = sp.DeadBytes - sp.AwaitingBytes;
    var overhead = Math.max(0, sp.SegmentBytes - sp.LiveBytes - sp.FragmentedBytes - sp.DeadBytes);
    var parts = pinned > 0 ?
      [["c-live", sp.LiveBytes], ["c-over", overhead], ["c-pinned", pinned], ["c-meta", sp.MetaBytes]] :
      [["c-live", sp.LiveBytes], ["c-over", overhead], ["c-frag", sp.FragmentedBytes], ["c-await", sp.AwaitingBytes], ["c-dead", deadNot], ["c-meta", sp.MetaBytes]];
    var total = 0; parts.forEach(function (p) { total += Math.max(0, p[1]); });
    var bar = $("fp-bar"); clear(bar);
    parts.forEach(function (p) {
      if (p[1] <= 0 || total <= 0) return;
      var s = el("span", { "class": p[0], title: human(p[1]) });
      s.style.width = (100 * p[1] / total).toFixed(3) + "%";
      bar.appendChild(s);
    });
    setBytes("fp-live", sp.LiveBytes);
    setBytes("fp-fragmented", sp.FragmentedBytes);
    setBytes("fp-dead", sp.DeadBytes);
    setBytes("fp-awaiting", sp.AwaitingBytes);
    setBytes("fp-pinned", pinned);
    setBytes("fp-meta", sp.MetaBytes);
    setBytes("fp-segments", sp.SegmentBytes);
    setBytes("fp-overhead", overhead);
    $("fp-segcount").setAttribute("data-count", String(sp.SegmentCount));
    setText("fp-segcount", sp.SegmentCount + " segments");
    setText("fp-deadcount", sp.DeadSegments + " segments, " + sp.AwaitingSegments + " with a deadline");
    setText("fp-deadline", sp.EarliestDeadline && sp.EarliestDeadline.indexOf("0001-") !== 0 ? when(sp.EarliestDeadline) : "none");
    setText("fp-metacount", sp.MetaObjects + " objects");
    var pn = []; if (sp.Pinned) for (var n in sp.Pinned) pn.push(n);
    setText("fp-pinnedby", pn.length ? "by " + pn.join(", ") : "");
  }

  function renderExec(st, old) {
    var e = st.engine, sp = st.space;
    setText("cl-pending", sp ? sp.TombstonesPending + " tombstones, " + human(sp.TombstoneBytes) : "–");
    $("cl-pending").setAttribute("data-count", sp ? String(sp.TombstonesPending) : "");
    setText("cl-done", e.tombstones_processed + " tombstones, " + e.extents_cleaned + " extents (" + human(e.bytes_cleaned) + ")");
    setText("cl-rate", rate(st, old, function (s) { return s.engine.extents_cleaned; }).toFixed(1) + " extents/s");
    var lb = e.last_batch;
    setText("cl-last", lb && lb.at.indexOf("0001-") !== 0 ? when(lb.at) + ": " + lb.extents + " extents, " + lb.tombstones + " tombstones finished, " + human(lb.bytes) : "none yet");
    var r = st.reclaim, t = st.reclaim_totals;
    if (!r) { setText("cy-phase", st.role === "writer" ? "starting" : "not run by readers"); return; }
    setText("cy-phase", r.phase + (r.trigger ? " (" + r.trigger + ", started " + when(r.cycle_started) + ")" : ""));
    var lc = r.last_cycle;
    setText("cy-last", lc ? when(lc.end) + " · " + lc.result + " · " + (lc.trigger || "?") + " · deleted " + lc.Deleted + ", freed " + human(lc.BytesFreed) +
      ", repacks " + lc.Repacks + ", relocated " + lc.RelocatedFrames + " frames, " + dur(lc.Duration / 1e9) + (lc.Blocked ? " · " + lc.Blocked : "") + (lc.error ? " · " + lc.error : "") : "none yet");
    setText("cy-next", r.next_cycle ? when(r.next_cycle) + " (" + r.next_reason + ")" : "idle until something changes");
    var cycles = 0; for (var k in t.cycles) cycles += t.cycles[k];
    setText("cy-totals", cycles + " cycles, " + t.deleted + " segments deleted, " + human(t.bytes_freed) + " freed, " + t.repacks + " repacks");
    var ul = $("jobs"); clear(ul);
    (r.jobs || []).forEach(function (j) {
      ul.appendChild(el("li", {}, "#" + j.id + " " + j.phase + ": " + j.sources.length + " sources (" + human(j.source_bytes) + "), gathered " +
        human(j.gathered) + " of " + human(j.live_bytes) + (j.output ? " → " + j.output : "") + (j.moved ? ", " + j.moved + " moved" : "")));
    });
    if (!r.jobs || !r.jobs.length) ul.appendChild(el("li", { "class": "muted" }, "no repack in flight"));
    var ls = r.last_sweep;
    setText("sw-state", (r.sweep_running ? "running; " : "") + "next " + (r.next_sweep ? when(r.next_sweep) : "not scheduled"));
    setText("sw-last", ls ? when(ls.Start) + ": listed " + ls.Listed + ", " + ls.Deleted + " orphans deleted (" + human(ls.DeletedBytes) + ")" + (ls.error ? " · " + ls.error : "") : "none since start");
    var g = st.metagc;
    if (g) setText("gc-state", (g.passes ? "last " + when(g.last_at) + ": " + g.last.Deleted + " objects, " + human(g.last.Bytes) + (g.error ? " · " + g.error : "") : "no pass yet") + "; next " + (g.next ? when(g.next) : "–"));
  }

  function renderCheckpoints(st) {
    var tb = $("ckpts"); clear(tb);
    var cks = st.checkpoints || [];
    if (!cks.length) { var tr = el("tr"); tr.appendChild(el("td", { "class": "muted" }, "none")); tb.appendChild(tr); }
    cks.forEach(function (c) {
      var tr = el("tr");
      tr.appendChild(el("td", {}, c.Name + (c.Name.indexOf("reader-") === 0 ? " (replica)" : "")));
      tr.appendChild(el("td", {}, c.Kind));
      tr.appendChild(el("td", {}, c.Kind === "ephemeral" ? "expires " + when(c.ExpireTime) : "until deleted"));
      tb.appendChild(tr);
    });
    setText("ck-error", st.checkpoint_error || "");
  }

  function renderThroughput(st, old) {
    setText("io-read", human(rate(st, old, function (s) { return io(s, "bytes", ["read"]); })) + "/s");
    setText("io-write", human(rate(st, old, function (s) { return io(s, "bytes", ["write"]); })) + "/s");
    setText("io-rops", rate(st, old, function (s) { return io(s, "count", ["read"]); }).toFixed(1) + " ops/s");
    setText("io-wops", rate(st, old, function (s) { return io(s, "count", ["write"]); }).toFixed(1) + " ops/s");
    setText("st-req", rate(st, old, function (s) {
      var c = s.store_requests; return c.Put + c.Get + c.GetRange + c.Head + c.Delete + c.DeleteMany + c.List;
    }).toFixed(1) + " req/s");
    setText("st-up", human(rate(st, old, function (s) { return s.store_requests.BytesUp; })) + "/s");
    setText("st-down", human(rate(st, old, function (s) { return s.store_requests.BytesDown; })) + "/s");
    var h = st.engine.barrier_latency;
    setText("bar-rate", rate(st, old, function (s) { return s.engine.barriers; }).toFixed(2) + "/s");
    setText("bar-lat", "p50 " + dur(quantile(h, 0.5)) + " · p99 " + dur(quantile(h, 0.99)));
    setText("dirty", human(st.dirty_bytes));
    var c = st.cache, hits = c.MemHits + c.DiskHits + c.PendingHits, all = hits + c.Misses;
    setText("cache", all ? (100 * hits / all).toFixed(1) + "% hits (" + human(c.MemBytes) + " in memory, " + human(c.DiskBytes) + " on disk)" : "no reads yet");
    setText("mem", human(st.memory_rss) + " of " + (st.memory_limit > 0 && st.memory_limit < 9e18 ? human(st.memory_limit) : "no limit"));
    setText("corrupt", String(c.Corrupt));
  }

  function axisLabels(g, w, h, maxv, fmt) {
    g.appendChild(svg("line", { "class": "axis", x1: 56, y1: h - 18, x2: w, y2: h - 18 }));
    g.appendChild(svg("text", { x: 0, y: 12 }, fmt(maxv)));
    g.appendChild(svg("text", { x: 0, y: h - 20 }, "0"));
  }

  function renderTombChart(hist) {
    var box = $("chart-tombstones"), W = Math.max(300, box.clientWidth || 600), H = 180;
    clear(box);
    box.setAttribute("viewBox", "0 0 " + W + " " + H);
    var pts = hist.tombstones || [], maxv = 1;
    pts.forEach(function (p) { maxv = Math.max(maxv, p.extents, p.tombstones); });
    axisLabels(box, W, H, maxv, function (v) { return String(v); });
    var span = 3600 * 1000, now = hist.now_ms, x0 = 56, cw = W - x0, bw = Math.max(1.5, cw / 360 - 0.5);
    var total = 0;
    pts.forEach(function (p) {
      var x = x0 + cw * (1 - (now - p.t) / span) - bw;
      if (x < x0) return;
      var he = (H - 22) * p.extents / maxv, ht = (H - 22) * p.tombstones / maxv;
      var r1 = svg("rect", { "class": "s2 pt", x: x.toFixed(1), y: (H - 18 - he).toFixed(1), width: bw.toFixed(1), height: Math.max(0.5, he).toFixed(1),
        "data-t": String(p.t), "data-extents": String(p.extents), "data-tombstones": String(p.tombstones) });
      r1.appendChild(svg("title", {}, new Date(p.t).toLocaleTimeString() + ": " + p.extents + " extents, " + p.tombstones + " tombstones"));
      box.appendChild(r1);
      if (p.tombstones > 0) box.appendChild(svg("rect", { "class": "s1", x: (x + bw / 4).toFixed(1), y: (H - 18 - ht).toFixed(1), width: (bw / 2).toFixed(1), height: ht.toFixed(1) }));
      total += p.extents;
    });
    box.appendChild(svg("text", { x: x0, y: H - 4 }, "−60 min"));
    box.appendChild(svg("text", { x: W - 26, y: H - 4 }, "now"));
    setText("tomb-sum", total + " extents deleted in the last hour");
  }

  function renderCycleChart(hist) {
    var box = $("chart-cycles"), W = Math.max(300, box.clientWidth || 600), H = 180;
    clear(box);
    box.setAttribute("viewBox", "0 0 " + W + " " + H);
    var cs = hist.cycles || [], maxv = 1;
    cs.forEach(function (c) { maxv = Math.max(maxv, c.bytes_freed); });
    axisLabels(box, W, H, maxv, human);
    var x0 = 56, cw = W - x0, n = Math.max(cs.length, 30), bw = Math.min(cw / n, 40);
    cs.forEach(function (c, i) {
      var h = (H - 22) * c.bytes_freed / maxv;
      var r = svg("rect", { "class": "s3 pt", x: (x0 + i * bw + 1).toFixed(1), y: (H - 18 - h).toFixed(1), width: Math.max(1, bw - 2).toFixed(1), height: Math.max(0.5, h).toFixed(1),
        "data-bytes": String(c.bytes_freed), "data-deleted": String(c.deleted) });
      r.appendChild(svg("title", {}, new Date(c.end).toLocaleTimeString() + ": freed " + human(c.bytes_freed) + ", " + c.deleted + " deleted, " + c.repacks + " repacks"));
      box.appendChild(r);
    });
    box.appendChild(svg("text", { x: x0, y: H - 4 }, cs.length ? cs.length + " cycles that freed or moved something" : "no cycle has freed anything yet"));
  }

  function get(path) {
    return fetch(path, { cache: "no-store", credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error(path + ": " + r.status);
      return r.json();
    });
  }

  function tick() {
    Promise.all([get("/v1/monitor"), get("/v1/history")]).then(function (res) {
      var st = res[0], hist = res[1];
      renderHeader(st); renderDamage(st); renderSpace(st); renderExec(st, prev); renderCheckpoints(st);
      renderThroughput(st, prev); renderTombChart(hist); renderCycleChart(hist);
      prev = st;
      setText("updated", "updated " + new Date(st.at).toLocaleTimeString());
      document.body.setAttribute("data-updates", String(1 + parseInt(document.body.getAttribute("data-updates") || "0", 10)));
      setText("fetch-error", "");
    }).catch(function (e) { setText("fetch-error", String(e)); })
      .then(function () { setTimeout(tick, interval); });
  }
  tick();
})();
