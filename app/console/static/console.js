// Agent Mesh console: small improvements over plain HTML forms. Everything here is
// optional — every page and form works without it. Never builds HTML from data:
// text goes in with textContent.
(function () {
  "use strict";

  document.addEventListener("click", function (e) {
    var btn = e.target.closest("[data-copy]");
    if (!btn) return;
    var field = document.querySelector(btn.getAttribute("data-copy"));
    if (!field) return;
    field.select();
    var done = function () { btn.textContent = "Copied"; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(field.value).then(done, function () { document.execCommand("copy"); done(); });
    } else {
      document.execCommand("copy");
      done();
    }
  });

  document.addEventListener("submit", function (e) {
    var form = e.target;
    var question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { e.preventDefault(); return; }
    // Past the console's own limit the server cannot send the text back: say so here,
    // before sending, and keep what was typed. Below it the server answers the
    // form itself (a too-large message comes back with its text), JS or not.
    var max = parseInt(document.body.getAttribute("data-form-max") || "0", 10);
    if (max && form.method.toLowerCase() === "post" && !form.enctype.startsWith("multipart")) {
      var size = new Blob([new URLSearchParams(new FormData(form, e.submitter)).toString()]).size;
      if (size > max) {
        e.preventDefault();
        var note = form.querySelector("[data-size-problem]");
        if (!note) {
          note = document.createElement("div");
          note.className = "problem";
          note.setAttribute("role", "alert");
          note.setAttribute("data-size-problem", "");
          form.insertBefore(note, form.firstChild);
        }
        note.textContent = "Too large to send: " + (size / 1048576).toFixed(2) + " MiB (the console takes at most " +
          (max / 1048576).toFixed(2) + " MiB, and a message at most the gateway's body limit). Your text is still here; shorten it.";
        return;
      }
    }
    // A loading state: the button says the request is on its way (and is not pressed twice).
    var button = e.submitter || form.querySelector("button[type=submit]");
    if (button && form.method.toLowerCase() === "post") {
      button.setAttribute("aria-busy", "true");
      setTimeout(function () { button.disabled = true; }, 0);
    }
  });
  // Coming back with the browser's back button shows the page as it was left: undo the busy state.
  window.addEventListener("pageshow", function () {
    document.querySelectorAll("button[aria-busy]").forEach(function (b) {
      b.removeAttribute("aria-busy");
      b.disabled = false;
    });
  });

  function fmt(ts) {
    return ts ? ts.replace("T", " ").slice(0, 19) : "";
  }

  function feedItem(item) {
    var ev = item.event || {};
    var li = document.createElement("li");
    li.className = "ev fresh";
    li.setAttribute("data-type", ev.type || "");
    var when = document.createElement("span");
    when.className = "muted";
    when.textContent = fmt(ev.created_at);
    var badge = document.createElement("span");
    badge.className = "badge";
    badge.textContent = ev.type || "event";
    var who = document.createElement("strong");
    who.textContent = item.agent_id;
    li.append(when, " ", badge, " ", who);
    if (ev.from_agent_id) li.append(" from " + ev.from_agent_id);
    if (ev.task_id) {
      var a = document.createElement("a");
      a.href = "/console/tasks/" + encodeURIComponent(ev.task_id);
      var code = document.createElement("code");
      code.textContent = ev.task_id;
      a.append(code);
      li.append(" ", a);
    }
    var msg = ev.payload && ev.payload.message;
    if (msg && Array.isArray(msg.parts)) {
      msg.parts.forEach(function (p) {
        if (p && p.kind === "text") {
          var s = document.createElement("span");
          s.className = "snippet";
          s.textContent = p.text.length > 160 ? p.text.slice(0, 157) + "..." : p.text;
          li.append(" ", s);
        }
      });
    }
    return li;
  }

  // "mesh:refresh" asks the page's live parts to re-read: at most about three times a
  // second, and always once more after the last event (a plain throttle would drop
  // the last events of a burst and leave a part behind what happened).
  var lastRefresh = 0, refreshTimer = null;
  function refreshSoon() {
    if (refreshTimer) return;
    var wait = Math.max(0, lastRefresh + 300 - Date.now());
    refreshTimer = setTimeout(function () {
      refreshTimer = null;
      lastRefresh = Date.now();
      document.body.dispatchEvent(new CustomEvent("mesh:refresh"));
    }, wait);
  }

  function live() {
    var host = document.querySelector("[data-live]");
    if (!host || !window.EventSource) return;
    var status = document.querySelector("[data-live-status]");
    var cursor = host.getAttribute("data-cursor");
    // After a drop the browser reconnects by itself, sending the last id (the whole
    // cursor) as Last-Event-ID: the server resumes every agent where it stopped.
    var source = new EventSource("/console/feed/stream" + (cursor ? "?cursor=" + encodeURIComponent(cursor) : ""));
    var list = document.getElementById("feed-list");
    var empty = document.getElementById("feed-empty");
    source.onopen = function () {
      window.meshLive = true;
      status = document.querySelector("[data-live-status]");  // a live part may have replaced it
      if (status) { status.textContent = "live"; status.classList.add("on"); }
    };
    source.onerror = function () {
      window.meshLive = false;
      status = document.querySelector("[data-live-status]");
      if (status) { status.textContent = "reconnecting…"; status.classList.remove("on"); }
    };
    source.onmessage = function (e) {
      var item;
      try { item = JSON.parse(e.data); } catch (err) { return; }
      if (list) {
        list.insertBefore(feedItem(item), list.firstChild);
        if (empty) empty.hidden = true;
      }
      document.body.dispatchEvent(new CustomEvent("mesh:event", { detail: item }));
      refreshSoon();
    };
    window.addEventListener("pagehide", function () { source.close(); });
  }

  // A task's page follows the task: when the feed brings an event of this task, the
  // page is fetched again and its live parts are replaced (server-rendered HTML,
  // parsed, never built from the event's data). A part holding typed text is kept.
  function followTask() {
    var host = document.querySelector("[data-task-live]");
    if (!host) return;
    var taskId = host.getAttribute("data-task-live");
    var busy = false, again = false;
    function typed(part) {
      return Array.prototype.some.call(part.querySelectorAll("textarea, input[type=text]"), function (f) {
        return f.value !== "" || f === document.activeElement;
      });
    }
    function refresh() {
      if (busy) { again = true; return; }
      busy = true;
      fetch(window.location.href, { credentials: "same-origin", headers: { "X-Mesh-Live": "1" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) return;
          var doc = new DOMParser().parseFromString(html, "text/html");
          document.querySelectorAll("[data-live-part]").forEach(function (part) {
            if (part.hasAttribute("data-live-keep-typed") && typed(part)) return;
            var fresh = doc.getElementById(part.id);
            if (fresh) part.replaceWith(document.importNode(fresh, true));
          });
          var status = document.querySelector("[data-live-status]");
          if (status && window.meshLive) { status.textContent = "live"; status.classList.add("on"); }
          document.body.dispatchEvent(new CustomEvent("mesh:task-updated", { detail: { task_id: taskId } }));
        })
        .catch(function () {})
        .then(function () { busy = false; if (again) { again = false; refresh(); } });
    }
    document.body.addEventListener("mesh:event", function (e) {
      var ev = (e.detail && e.detail.event) || {};
      if (ev.task_id === taskId) refresh();
    });
  }

  // The agent page's current run: its block is re-read every 2 s while the page is
  // visible (the gateway learns of a run's start and end from the agent's runtime,
  // not from the feed). Server-rendered HTML, parsed, never built from data.
  function followRun() {
    var block = document.querySelector("[data-run-live]");
    if (!block) return;
    var url = block.getAttribute("data-run-live");
    var busy = false, shown = null;
    function refresh() {
      if (busy || document.hidden) return;
      busy = true;
      fetch(url, { credentials: "same-origin", headers: { "X-Mesh-Live": "1" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (html === null || html === shown) return;
          shown = html;
          var doc = new DOMParser().parseFromString(html, "text/html");
          block.replaceChildren.apply(block, Array.prototype.map.call(doc.body.childNodes, function (n) {
            return document.importNode(n, true);
          }));
          document.body.dispatchEvent(new CustomEvent("mesh:run-updated"));
        })
        .catch(function () {})
        .then(function () { busy = false; });
    }
    setInterval(refresh, 2000);
    document.addEventListener("visibilitychange", refresh);
  }

  function start() { followTask(); followRun(); live(); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
