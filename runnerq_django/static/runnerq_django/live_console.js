/* The live console on the queues overview: fetches the overview's live.json every few seconds
   (unless paused) and draws it with uPlot. Loaded as a static file, no inline script, so a
   Content-Security-Policy of script-src 'self' allows it. Text goes in with textContent only. */
(function () {
  "use strict";
  var root = document.getElementById("rq-live");
  if (!root || typeof uPlot === "undefined") { return; }
  var url = root.getAttribute("data-url");
  var changelist = root.getAttribute("data-changelist-url");
  var refreshMs = Math.max(1, parseFloat(root.getAttribute("data-refresh-seconds")) || 5) * 1000;
  var toggle = document.getElementById("rq-live-toggle");
  var windowSelect = document.getElementById("rq-live-window");
  var queueSelect = document.getElementById("rq-live-queue");
  var stateText = document.getElementById("rq-live-state");
  var updatedText = document.getElementById("rq-live-updated");
  var refreshesText = document.getElementById("rq-live-refreshes");
  var paused = false, timer = null, refreshes = 0, charts = {}, inFlight = false;

  var CHARTS = {
    outcomes: {el: "rq-chart-outcomes", from: "series", keys: ["completed", "failed", "dead_lettered"],
               labels: ["completed", "failed", "dead-lettered"], colors: ["#34a853", "#ea8600", "#d93025"], bars: true},
    depth: {el: "rq-chart-depth", from: "depth", keys: ["due", "scheduled", "processing"],
            labels: ["due", "scheduled", "running"], colors: ["#1a73e8", "#a142f4", "#34a853"]},
    latency: {el: "rq-chart-latency", from: "series", keys: ["p50", "p95", "p99"],
              labels: ["p50", "p95", "p99"], colors: ["#1a73e8", "#ea8600", "#d93025"]}
  };

  function chartData(spec, data) {
    var source = data[spec.from];
    return [source.t].concat(spec.keys.map(function (k) { return source[k]; }));
  }

  function makeChart(name, data) {
    var spec = CHARTS[name], el = document.getElementById(spec.el);
    el.textContent = "";
    var series = [{}].concat(spec.keys.map(function (k, i) {
      // Points too: a depth sample or a latency bin alone between gaps has no line to draw.
      var s = {label: spec.labels[i], stroke: spec.colors[i], width: 2, spanGaps: name !== "outcomes",
               points: {show: !spec.bars, size: 5}};
      if (spec.bars) { s.fill = spec.colors[i] + "33"; s.paths = uPlot.paths.bars({size: [0.8, 40]}); }
      return s;
    }));
    var opts = {width: Math.max(320, el.clientWidth || 420), height: 220, series: series,
                scales: {x: {time: true}}, axes: [{}, {size: 60}], legend: {live: true}};
    charts[name] = new uPlot(opts, chartData(spec, data), el);
    el.setAttribute("data-points", String(data[spec.from].t.length));
  }

  function draw(data) {
    Object.keys(CHARTS).forEach(function (name) {
      var spec = CHARTS[name];
      if (!charts[name]) { makeChart(name, data); return; }
      charts[name].setData(chartData(spec, data));
      document.getElementById(spec.el).setAttribute("data-points", String(data[spec.from].t.length));
    });
  }

  function cell(row, text, numeric) {
    var td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "—" : String(text);
    if (numeric) { td.className = "rq-num"; }
    row.appendChild(td);
    return td;
  }

  function fill(id, rows, render, empty) {
    var body = document.querySelector("#" + id + " tbody");
    body.textContent = "";
    if (!rows.length) {
      var tr = document.createElement("tr"), td = cell(tr, empty || "nothing in this window");
      td.colSpan = 8; td.className = "rq-muted"; body.appendChild(tr); return;
    }
    rows.forEach(function (r) { var tr = document.createElement("tr"); render(tr, r); body.appendChild(tr); });
  }

  function age(seconds) {
    if (seconds === null || seconds === undefined) { return "—"; }
    return seconds < 120 ? Math.round(seconds) + " s ago" : Math.round(seconds / 60) + " min ago";
  }

  function typeLink(tr, queue, type) {
    var td = document.createElement("td"), a = document.createElement("a");
    a.href = changelist + "?queue=" + encodeURIComponent(queue) + "&type=" + encodeURIComponent(type);
    a.textContent = type; a.className = "rq-mono"; td.appendChild(a); tr.appendChild(td);
  }

  function queueChoices(data) {
    // The queues seen in the window, kept once seen (the chosen one stays chosen).
    var known = {};
    Array.prototype.forEach.call(queueSelect.options, function (o) { known[o.value] = true; });
    data.queues.forEach(function (q) {
      if (known[q.queue]) { return; }
      var option = document.createElement("option");
      option.value = q.queue; option.textContent = q.queue; queueSelect.appendChild(option);
    });
  }

  function horizon(data) {
    // A transaction, replication slot or prepared transaction holding back vacuum (storage.horizon).
    var note = document.getElementById("rq-live-horizon"), h = data.horizon;
    if (!note) { return; }
    var oldest = h && h.held ? h.holders[0] : null;
    note.hidden = !oldest;
    note.textContent = oldest ? "xmin horizon held back by " + oldest.kind + " \u201c" + oldest.name + "\u201d" +
      (oldest.pid !== null ? " (pid " + oldest.pid + (oldest.state ? ", " + oldest.state : "") + ")" : "") +
      (oldest.seconds !== null ? ", open for " + age(oldest.seconds).replace(" ago", "") : "") + ", " + h.age_xids + " transactions behind: " +
      "every claim walks past what it keeps from being vacuumed" : "";
  }

  function tables(data) {
    horizon(data);
    fill("rq-live-queues", data.queues, function (tr, q) {
      cell(tr, q.queue); cell(tr, q.completed, true); cell(tr, q.failed, true); cell(tr, q.dead_lettered, true);
      cell(tr, q.in_use + " / " + q.capacity, true);
    });
    // The window's other types come summed in one row ("other"), after the shown ones.
    fill("rq-live-types", data.other ? data.types.concat([data.other]) : data.types, function (tr, t) {
      if (t === data.other) {
        cell(tr, "—"); cell(tr, "other (" + t.types + (t.types === 1 ? " type)" : " types)")).className = "rq-muted";
      } else {
        cell(tr, t.queue); typeLink(tr, t.queue, t.type);
      }
      cell(tr, t.completed, true);
      var failed = cell(tr, t.failed, true), dead = cell(tr, t.dead_lettered, true);
      if (t.failed) { failed.className += " rq-warn"; }
      if (t.dead_lettered) { dead.className += " rq-warn"; }
      cell(tr, t.p50_ms, true); cell(tr, t.p95_ms, true); cell(tr, t.max_ms, true);
    });
    fill("rq-live-pools", data.pools, function (tr, p) {
      cell(tr, p.pool_id.slice(0, 8)).className = "rq-mono"; cell(tr, p.queue); cell(tr, p.slots, true);
      cell(tr, age(p.heartbeat_age_s) + (p.alive ? "" : " (stale)"));
      if (!p.alive) { tr.className = "rq-muted"; }
    }, "no worker pool seen in the last hour");
    fill("rq-live-claims", data.claims, function (tr, c) {
      cell(tr, c.worker).className = "rq-mono"; cell(tr, c.queue); cell(tr, c.claims, true);
      cell(tr, age(c.oldest_claim_age_s));
    }, "no claim held right now");
  }

  function schedule() {
    clearTimeout(timer);
    if (!paused) { timer = setTimeout(refresh, refreshMs); }
  }

  function refresh() {
    if (paused || inFlight) { return; }
    inFlight = true;
    // The URL may carry the overview's database already (?database=, several databases).
    var query = (url.indexOf("?") >= 0 ? "&" : "?") + "window=" + encodeURIComponent(windowSelect.value) +
                (queueSelect.value ? "&queue=" + encodeURIComponent(queueSelect.value) : "");
    fetch(url + query, {credentials: "same-origin", headers: {Accept: "application/json"}})
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.json();
      })
      .then(function (data) {
        if (paused) { return; }  // paused while the request was on its way: show nothing new
        draw(data); tables(data); queueChoices(data);
        refreshes += 1;
        refreshesText.textContent = String(refreshes);
        root.setAttribute("data-refreshes", String(refreshes));
        updatedText.textContent = new Date().toLocaleTimeString();
        stateText.textContent = "live";
      })
      .catch(function (err) { stateText.textContent = "refresh failed (" + err.message + "); retrying"; })
      .then(function () { inFlight = false; schedule(); });
  }

  toggle.addEventListener("click", function () {
    paused = !paused;
    toggle.textContent = paused ? "Resume" : "Pause";
    toggle.setAttribute("aria-pressed", paused ? "true" : "false");
    root.classList.toggle("rq-paused", paused);
    stateText.textContent = paused ? "paused" : "live";
    if (paused) { clearTimeout(timer); } else { refresh(); }
  });
  function rechoose() {
    Object.keys(charts).forEach(function (name) { charts[name].destroy(); delete charts[name]; });
    if (!paused) { clearTimeout(timer); refresh(); }
  }
  windowSelect.addEventListener("change", rechoose);
  queueSelect.addEventListener("change", rechoose);
  refresh();
}());
