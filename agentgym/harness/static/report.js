// The transcript viewer of report.html. Episode text only ever reaches the DOM through
// textContent.
(function () {
  "use strict";
  var PAGE = 500, PREVIEW = 160;
  var episodes = JSON.parse(document.getElementById("episode-data").textContent);
  var list = document.getElementById("ep-list"), more = document.getElementById("more");
  var detail = document.getElementById("detail"), count = document.getElementById("count");
  var search = document.getElementById("search"), category = document.getElementById("category");
  var entry = document.getElementById("entry");
  var matches = [], shown = 0, selected = null, texts = [];

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function clip(text, n) { return text.length > n ? text.slice(0, n) + "\u2026" : text; }
  function haystack(i) {
    if (texts[i] === undefined) {
      var ep = episodes[i], parts = [ep.instruction];
      ep.turns.forEach(function (t) { parts.push(t.observation, t.response); });
      texts[i] = parts.join("\n").toLowerCase();
    }
    return texts[i];
  }
  function row(i) {
    var ep = episodes[i], li = el("li", "ep");
    li.dataset.index = i;
    li.appendChild(el("span", "badge " + ep.category, ep.category));
    li.appendChild(el("span", "ep-title", ep.entry + " \u00b7 task " + ep.task_id + " \u00b7 " +
                      ep.turns.length + " turns"));
    var first = ep.instruction || (ep.turns.length ? ep.turns[0].observation : "");
    li.appendChild(el("span", "preview", clip(first, PREVIEW)));
    return li;
  }
  function appendPage() {
    var end = Math.min(matches.length, shown + PAGE), frag = document.createDocumentFragment();
    for (; shown < end; shown++) frag.appendChild(row(matches[shown]));
    list.appendChild(frag);
    more.hidden = shown >= matches.length;
    count.textContent = matches.length + " of " + episodes.length + " episodes" +
      (shown < matches.length ? " (" + shown + " listed)" : "");
  }
  function filter() {
    var q = search.value.toLowerCase(), c = category.value, n = entry.value;
    matches = [];
    for (var i = 0; i < episodes.length; i++) {
      var ep = episodes[i];
      if ((!c || ep.category === c) && (!n || ep.entry === n) &&
          (!q || haystack(i).indexOf(q) >= 0)) matches.push(i);
    }
    list.textContent = "";
    shown = 0;
    appendPage();
  }
  function block(parent, label, text) {
    parent.appendChild(el("div", "label", label));
    parent.appendChild(el("pre", null, text));
  }
  function show(i) {
    var ep = episodes[i];
    detail.textContent = "";
    detail.appendChild(el("h3", null, ep.id));
    var facts = el("dl", "facts");
    [["entry", ep.entry], ["task", ep.task_id], ["task type", ep.task_type || "-"],
     ["agent", ep.agent], ["seed", ep.seed], ["outcome", ep.category + ", return " + ep.outcome],
     ["wall time", ep.wall_time.toFixed(3) + " s"]].forEach(function (kv) {
      facts.appendChild(el("dt", null, kv[0]));
      facts.appendChild(el("dd", null, kv[1]));
    });
    detail.appendChild(facts);
    if (ep.error) block(detail, "infrastructure error", ep.error);
    ep.failed_attempts.forEach(function (a, k) { block(detail, "failed attempt " + (k + 1), a); });
    if (ep.instruction) block(detail, "instruction", ep.instruction);
    if (!ep.turns.length) detail.appendChild(el("p", "note", "No turns."));
    ep.turns.forEach(function (t, k) {
      var turn = el("div", t.valid ? "turn" : "turn invalid");
      turn.appendChild(el("h4", null, "Turn " + (k + 1) + " \u00b7 reward " + t.reward +
                          " \u00b7 " + (t.valid ? "valid" : "invalid") + " action"));
      block(turn, "observation", t.observation);
      block(turn, "response", t.response);
      block(turn, "action", t.action);
      detail.appendChild(turn);
    });
  }
  list.addEventListener("click", function (event) {
    var li = event.target.closest("li.ep");
    if (!li) return;
    if (selected) selected.classList.remove("selected");
    selected = li;
    li.classList.add("selected");
    show(Number(li.dataset.index));
  });
  more.addEventListener("click", appendPage);
  search.addEventListener("input", filter);
  category.addEventListener("change", filter);
  entry.addEventListener("change", filter);
  filter();
})();
