// The fleet page's only script: follow the daemon's server-sent events and re-fetch the live
// parts of the page (elements with data-live) and the tab's title and icon (/alarm.json) when
// the timeline moves or a tick comes; ask before a restart.
"use strict";
(function () {
  const live = document.querySelectorAll("[data-live]");
  const feed = document.getElementById("feed");
  const badge = document.getElementById("live");
  let pending = null;

  const icon = document.getElementById("icon");
  const title = document.documentElement.dataset.title || document.title;

  function alarm() {
    fetch("/alarm.json", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (a) {
        document.title = a.prefix + title;
        if (icon && icon.getAttribute("href") !== a.icon) icon.setAttribute("href", a.icon);
      })
      .catch(function () { /* the next event tries again */ });
  }

  function refresh() {
    pending = null;
    alarm();
    live.forEach(function (el) {
      fetch(el.dataset.live, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (html) { el.innerHTML = html; })
        .catch(function () { /* the next event tries again */ });
    });
  }
  function soon() { if (!pending) pending = setTimeout(refresh, 150); }

  function show(entry) {
    if (!feed) return;
    const li = document.createElement("li");
    const link = document.createElement("a");
    link.href = "/incidents/" + entry.incident;
    link.textContent = entry.subject + " #" + entry.incident;
    li.append(entry.at.slice(11, 19) + " ", link, " " + entry.summary);
    li.dataset.type = entry.type;
    if (feed.firstElementChild && feed.firstElementChild.classList.contains("muted")) {
      feed.firstElementChild.remove();
    }
    feed.prepend(li);
    while (feed.children.length > 50) feed.lastElementChild.remove();
  }

  // The stream is closed when the page is left: a browser keeps a left page (its back-forward
  // cache) with its stream open, and holds at most 6 connections to one server, so the seventh
  // page opened would wait for one of them. Shown again from that cache, it follows again.
  // The stream starts after the newest entry the page was rendered with (or the last one it
  // was sent), so an entry committed while the page loads, or while it sat in that cache,
  // still arrives and refreshes it.
  let source = null;
  let after = document.documentElement.dataset.after || "";
  function follow() {
    source = new EventSource(after ? "/events?after=" + after : "/events");
    source.onopen = function () { badge.textContent = "● live"; badge.classList.add("on"); };
    source.onerror = function () { badge.textContent = "○ reconnecting"; badge.classList.remove("on"); };
    source.addEventListener("timeline", function (e) {
      const entry = JSON.parse(e.data);
      after = String(entry.id);
      show(entry);
      soon();
    });
    source.addEventListener("tick", soon);
  }
  if (window.EventSource) {
    follow();
    window.addEventListener("pagehide", function () {
      if (source) source.close();
      source = null;
    });
    window.addEventListener("pageshow", function (e) {
      if (e.persisted && !source) { follow(); soon(); }
    });
  }

  // a picked end time is the browser's local time: say its offset from UTC
  function zones() {
    document.querySelectorAll("input[name=tz_offset]").forEach(function (input) {
      input.value = String(new Date().getTimezoneOffset());
    });
  }
  zones();

  // the silence form: what the typed target covers, as it is typed
  const target = document.getElementById("target");
  const preview = document.getElementById("preview-part");
  let typing = null;
  if (target && preview) {
    target.addEventListener("input", function () {
      clearTimeout(typing);
      typing = setTimeout(function () {
        const url = preview.dataset.preview + "?target=" + encodeURIComponent(target.value.trim());
        fetch(url, { credentials: "same-origin" })
          .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
          .then(function (html) { preview.innerHTML = html; zones(); })
          .catch(function () { /* the preview button still works */ });
      }, 200);
    });
  }

  document.querySelectorAll("form.act[data-action=restart]").forEach(function (form) {
    form.addEventListener("submit", function (e) {
      const name = form.querySelector("input[name=endpoint]").value;
      if (!window.confirm("Restart " + name + " now?")) { e.preventDefault(); return; }
      const yes = document.createElement("input");
      yes.type = "hidden"; yes.name = "confirm"; yes.value = "yes";
      form.append(yes);
    });
  });
})();
