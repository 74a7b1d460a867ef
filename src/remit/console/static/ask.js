// The Ask page, followed as the agent answers (remit's own script: no framework, no CDN).
//
// While the chat is thinking (#chat[data-thinking="true"]), it follows the chat's server-sent
// events (data-events, behind the session cookie) and appends each new message to #messages
// as it comes; once the turn is over (`idle`) it reloads the page, which then shows the draft
// with its forms. Without EventSource, or when the stream fails, it reloads every 2 s instead,
// as the page does without JavaScript. It may be loaded more than once (htmx runs a page's
// scripts again when it swaps the page in): a chat already followed is left alone.
(function () {
  "use strict";

  var LABELS = {
    user: null,
    assistant: "agent",
    tool: "agent read",
    act: "act",
    sandbox: "sandbox",
    note: "note"
  };

  function reloadSoon() {
    window.setTimeout(function () { window.location.reload(); }, 2000);
  }

  function render(message) {
    var item = document.createElement("li");
    item.id = "msg-" + message.seq;
    item.className = "msg-" + message.role;
    var outcome = message.data && message.data.outcome;
    if (message.role === "act" && outcome) {
      item.className += " outcome-" + outcome;
    }
    var who = document.createElement("span");
    who.className = "who";
    var label = LABELS[message.role];
    who.textContent = (label === null || label === undefined ? message.by : label) +
      (message.role === "act" && outcome ? " · " + outcome : "") + " · just now";
    var text = document.createElement("div");
    text.className = "text";
    text.textContent = message.text;
    item.appendChild(who);
    item.appendChild(text);
    return item;
  }

  function follow() {
    var chat = document.getElementById("chat");
    var list = document.getElementById("messages");
    if (!chat || !list || chat.dataset.thinking !== "true" || chat.dataset.following) {
      return;
    }
    chat.dataset.following = "true";
    if (typeof window.EventSource !== "function") {
      reloadSoon();
      return;
    }
    var url = chat.dataset.events + "?after=" + encodeURIComponent(chat.dataset.after || "0");
    var source = new window.EventSource(url);
    source.addEventListener("message", function (event) {
      if (!document.body.contains(chat)) {
        source.close();  // the person has gone to another page
        return;
      }
      var message = JSON.parse(event.data);
      if (!document.getElementById("msg-" + message.seq)) {
        list.appendChild(render(message));
      }
    });
    source.addEventListener("idle", function () {
      source.close();
      if (document.body.contains(chat)) {
        window.location.reload();
      }
    });
    source.addEventListener("error", function () {
      source.close();
      if (document.body.contains(chat)) {
        reloadSoon();
      }
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", follow);
  } else {
    follow();
  }
})();
