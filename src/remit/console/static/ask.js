// The Ask page, followed as the agent answers (remit's own script: no framework, no CDN).
//
// While the chat is thinking (#chat[data-thinking="true"]), it follows the chat's server-sent
// events (data-events, behind the session cookie) and appends each new message to #messages
// as it comes; once the turn is over (`idle`) it reloads the page, which then shows the draft
// with its forms. Without EventSource, or when the stream fails (or ends with an `error`
// event: the chat may no longer be read), it reloads every 2 s instead, as the page does
// without JavaScript.
//
// The console's body is hx-boost'ed: leaving the page swaps the body without unloading this
// script, so the stream is closed when htmx swaps the page out (or saves it to its history),
// and when the browser leaves it (pagehide). One stream at a time: it may be loaded more than
// once (htmx runs a page's scripts again when it swaps the page in), and a chat already
// followed is not followed twice.
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
  // What every load of the script shares: the stream open, if any, and its chat's element.
  var shared = window.remitAsk = window.remitAsk || { source: null, chat: null, hooked: false };

  function stop() {
    if (shared.source) {
      shared.source.close();
    }
    shared.source = null;
    shared.chat = null;
  }

  function following(chat) {
    // Whether this very chat element is followed by a stream still open.
    return shared.source !== null && shared.chat === chat &&
      shared.source.readyState !== window.EventSource.CLOSED;
  }

  function reloadSoon(chat) {
    window.setTimeout(function () {
      if (document.body.contains(chat)) {
        window.location.reload();
      }
    }, 2000);
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
      reloadSoon(chat);
      return;
    }
    if (following(chat)) {
      return;
    }
    stop();  // another page's stream, left open: this page follows its own chat
    var url = chat.dataset.events + "?after=" + encodeURIComponent(chat.dataset.after || "0");
    var source = new window.EventSource(url);
    shared.source = source;
    shared.chat = chat;
    function done() {
      source.close();
      if (shared.source === source) {
        shared.source = null;
        shared.chat = null;
      }
    }
    source.addEventListener("message", function (event) {
      if (!document.body.contains(chat)) {
        done();  // the person has gone to another page
        return;
      }
      var message = JSON.parse(event.data);
      if (!document.getElementById("msg-" + message.seq)) {
        list.appendChild(render(message));
      }
    });
    source.addEventListener("idle", function () {
      done();
      if (document.body.contains(chat)) {
        window.location.reload();
      }
    });
    // The connection failing, or the server's own `error` event (the chat may no longer be
    // read): the page, reloaded, says what is the matter.
    source.addEventListener("error", function () {
      done();
      reloadSoon(chat);
    });
  }

  if (!shared.hooked) {
    shared.hooked = true;
    // Leaving the page: hx-boost swaps the body (or saves it to its history first).
    document.addEventListener("htmx:beforeSwap", function (event) {
      var target = event.detail && event.detail.target;
      if (!shared.chat || !target || target === document.body || target.contains(shared.chat)) {
        stop();
      }
    });
    document.addEventListener("htmx:beforeHistorySave", stop);
    window.addEventListener("pagehide", stop);
    // Back to a page kept whole in the browser's cache: follow its chat again.
    window.addEventListener("pageshow", function (event) {
      var chat = document.getElementById("chat");
      if (event.persisted && chat && !following(chat)) {
        delete chat.dataset.following;
        follow();
      }
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", follow);
  } else {
    follow();
  }
})();
