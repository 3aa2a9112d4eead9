/* The activity list and detail pages refresh themselves: every few seconds (unless paused, or
   while the operator is choosing something on the page) the same URL is fetched and one region
   of the page is replaced with its new version. Loaded as a static file, no inline script (a
   Content-Security-Policy of script-src 'self' allows it); the region comes from our own server,
   rendered and escaped by Django. Also asks for confirmation of the destructive detail actions
   (data-rq-confirm) without an inline onclick. */
(function () {
  "use strict";
  var script = document.currentScript;
  var regionId = script && script.getAttribute("data-region");
  var refreshMs = Math.max(1, parseFloat(script && script.getAttribute("data-refresh-seconds")) || 5) * 1000;

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-rq-confirm]");
    if (button && !window.confirm(button.getAttribute("data-rq-confirm"))) { event.preventDefault(); }
  });

  var region = regionId && document.getElementById(regionId);
  if (!region || typeof fetch === "undefined") { return; }
  var paused = false, dirty = false, inFlight = false, refreshes = 0;

  var bar = document.createElement("p");
  bar.className = "rq-live-page";
  bar.id = "rq-live-page";
  var toggle = document.createElement("button");
  toggle.type = "button"; toggle.className = "button"; toggle.id = "rq-live-page-toggle"; toggle.textContent = "Pause";
  var state = document.createElement("span");
  state.className = "rq-muted"; state.id = "rq-live-page-state";
  state.textContent = "refreshes every " + refreshMs / 1000 + " s";
  bar.appendChild(toggle); bar.appendChild(document.createTextNode(" ")); bar.appendChild(state);
  region.parentNode.insertBefore(bar, region);

  function busy() {
    // The operator is choosing: a selected row, a changed field or the focus in a form control.
    var active = document.activeElement;
    if (active && region.contains(active) && /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(active.tagName)) { return true; }
    return dirty || region.querySelector("input.action-select:checked") !== null;
  }

  region.addEventListener("input", function () { dirty = true; });
  region.addEventListener("change", function () { dirty = true; });

  toggle.addEventListener("click", function () {
    paused = !paused;
    toggle.textContent = paused ? "Resume" : "Pause";
    state.textContent = paused ? "paused" : "refreshes every " + refreshMs / 1000 + " s";
    bar.classList.toggle("rq-paused", paused);
  });

  function refresh() {
    if (paused || inFlight || document.hidden || busy()) { return; }
    inFlight = true;
    fetch(window.location.href, {credentials: "same-origin", headers: {Accept: "text/html"}})
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(function (html) {
        if (paused || busy()) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(regionId);
        if (!fresh) { return; }
        var replacement = document.importNode(fresh, true);
        region.replaceWith(replacement);
        region = replacement;
        region.addEventListener("input", function () { dirty = true; });
        region.addEventListener("change", function () { dirty = true; });
        // The list's action checkboxes are wired by Django's actions.js; wire the new ones (the
        // old elements go with their listeners; only its two tiny document key listeners add up).
        var boxes = region.querySelectorAll("tr input.action-select");
        if (boxes.length && typeof window.Actions === "function") { window.Actions(boxes); }
        refreshes += 1;
        bar.setAttribute("data-refreshes", String(refreshes));
        state.textContent = "updated " + new Date().toLocaleTimeString() + " · refreshes every " + refreshMs / 1000 + " s";
      })
      .catch(function (err) { state.textContent = "refresh failed (" + err.message + "); retrying"; })
      .then(function () { inFlight = false; });
  }
  window.setInterval(refresh, refreshMs);
}());
