/* NoETL console: live updates for server-rendered pages. No framework and no build step; every
   page works without this file, it only keeps what is on screen current.
   - forms with data-confirm ask first;
   - an element with data-refresh="N" is re-read from the server every N seconds;
   - the execution page follows the execution's events (SSE) and, after each burst, swaps in the
     node states and fragments the server renders (GET .../state), keeping what was typed into
     the signal form. */
(function () {
  "use strict";

  document.addEventListener("submit", function (e) {
    var message = e.target.getAttribute("data-confirm");
    if (message && !window.confirm(message)) e.preventDefault();
  });

  function replaceFrom(doc, id) {
    var fresh = doc.getElementById(id), old = document.getElementById(id);
    if (fresh && old) old.innerHTML = fresh.innerHTML;
  }

  document.querySelectorAll("[data-refresh]").forEach(function (el) {
    var seconds = Math.max(1, parseInt(el.getAttribute("data-refresh"), 10) || 5);
    setInterval(function () {
      if (document.hidden) return;
      fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (html) replaceFrom(new DOMParser().parseFromString(html, "text/html"), el.id);
        })
        .catch(function () { /* the next tick tries again */ });
    }, seconds * 1000);
  });

  var root = document.getElementById("execution");
  if (!root || root.getAttribute("data-live") !== "true") return;
  var base = "/ui/executions/" + encodeURIComponent(root.getAttribute("data-id"));
  var busy = false, dirty = false;

  function openDetails(container) {
    var open = {};
    container.querySelectorAll("details[open][data-key]").forEach(function (d) {
      open[d.getAttribute("data-key")] = true;
    });
    return open;
  }

  // what a person typed into a form of the fragment (the signal form), so a repaint keeps it
  function typedFields(container) {
    var typed = {}, focused = document.activeElement;
    container.querySelectorAll("input[id], textarea[id]").forEach(function (f) {
      if (f.type !== "hidden" && f.value !== f.defaultValue) typed[f.id] = f.value;
    });
    return { values: typed, focus: focused && container.contains(focused) ? focused.id : null };
  }

  function setFragment(id, html) {
    var el = document.getElementById(id);
    if (!el || el.getAttribute("data-html") === html) return;
    var open = openDetails(el), typed = typedFields(el);
    el.innerHTML = html;
    el.setAttribute("data-html", html);
    el.querySelectorAll("details[data-key]").forEach(function (d) {
      if (open[d.getAttribute("data-key")]) d.open = true;
    });
    Object.keys(typed.values).forEach(function (fid) {
      var f = document.getElementById(fid);
      if (f) f.value = typed.values[fid];
    });
    var again = typed.focus && document.getElementById(typed.focus);
    if (again) again.focus();
  }

  function apply(state) {
    Object.keys(state.nodes).forEach(function (step) {
      document.querySelectorAll("svg.graph .node").forEach(function (g) {
        if (g.getAttribute("data-step") !== step) return;
        var node = state.nodes[step];
        g.setAttribute("class", g.getAttribute("class").replace(/\bst-[a-z]+/, "st-" + node.status));
        var text = g.querySelector("text.state");
        if (text) text.textContent = node.detail;
      });
    });
    state.arcs.forEach(function (arc) {
      document.querySelectorAll("svg.graph .edge").forEach(function (g) {
        if (g.getAttribute("data-arc") !== arc || /\bfired\b/.test(g.getAttribute("class"))) return;
        g.setAttribute("class", g.getAttribute("class") + " fired");
        var path = g.querySelector("path");
        if (path) path.setAttribute("marker-end", "url(#arrow-fired)");
      });
    });
    setFragment("summary", state.html.summary);
    setFragment("timeline", state.html.timeline);
    setFragment("outcome", state.html.outcome);
    root.setAttribute("data-status", state.status);
  }

  function refresh() {
    if (busy) { dirty = true; return; }
    busy = true;
    fetch(base + "/state", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (state) { if (state) apply(state); })
      .catch(function () { /* the next event tries again */ })
      .then(function () {
        busy = false;
        if (dirty) { dirty = false; setTimeout(refresh, 250); }
      });
  }

  var timer = null;
  function soon() {
    if (timer === null) timer = setTimeout(function () { timer = null; refresh(); }, 200);
  }

  var after = root.getAttribute("data-after");
  var source = new EventSource(base + "/events" + (after ? "?after=" + encodeURIComponent(after) : ""));
  source.onmessage = function (message) {
    var ev = {};
    try { ev = JSON.parse(message.data); } catch (e) { /* a frame we do not know */ }
    if (ev.name === "playbook.processed") {
      source.close();  // the stream ends here; without this EventSource would reconnect
      root.setAttribute("data-live", "false");
    }
    soon();
  };
})();
