// @ts-check
// The page: pick or drop a GGUF, see what is inside it, chat with it. All the work happens in the
// worker (Python + numpy under Pyodide); the page sends it commands and draws what it posts back.
// This file only wires the parts together and starts them. The parts, in app/:
//   dom.js            the page's elements, and making new ones
//   format.js         bytes and counts as the page shows them
//   status.js         what the page is doing: the status badge, the progress bar, the error banner
//   worker_client.js  the worker: starting it, the commands the page sends it
//   messages.js       the types of the messages to and from the worker (for the checker, make lint)
//   loading.js        the file picker, the drop zone, the demo model
//   saved_models.js   the models kept in the browser (opfs.js): saved after a load, Load and Forget
//   settings_form.js  the sampling fields (drawn from Python's rules), Memory and Workers
//   structure.js      the Structured output setting (none, JSON, a schema, a grammar) and its checked editor
//   tools_panel.js    the Tools setting: tool definitions (checked as typed); a reply's calls are cards
//   composer.js       the message box: Send, Stop, New chat, and the settings' check of every reply
//   layout.js         the phone layout: the settings fold away, the chat first
//   theme.js          the Theme setting: the system's colour scheme, light or dark
//   tabs.js           another tab open: said plainly, the saved chats and models kept in step
//   chats.js          the saved chats (store.js: IndexedDB): the list, New chat, export and import
//   turns.js          the conversation the page keeps: send, regenerate, edit and resend, delete, copy
//   chat_view.js      the messages, the reply as it streams, the statistics line
//   token_view.js     a reply as its tokens shaded by probability, the alternatives on hover and focus
//   trace_view.js     inside the step that wrote a token: the logit lens, the attention, the step's cost
//   markdown.js       a reply's Markdown as clean nodes (markdown-it, DOMPurify, highlight.js from vendor/)
//   model_view.js     the model card and the inspector
import { el } from "./app/dom.js";
import { addPiece, setStatsLine, showStats, useStopWords, wireChatView } from "./app/chat_view.js";
import {
  chatFailed, checkFailed, checked, offerAgain, refused, replyOver, request, sendable, settingEdited, started,
  wireComposer,
} from "./app/composer.js";
import { otherTabChanged, saveChat, startNewChat, useModelName, wireChats } from "./app/chats.js";
import { wireTabs } from "./app/tabs.js";
import { wireLayout } from "./app/layout.js";
import { wireTheme } from "./app/theme.js";
import {
  chat, replyDone, replyFailed, useMessages, usePageWords, useThinkingSwitch, wireTurns,
} from "./app/turns.js";
import { findDemo, loadFailed, loadSucceeded, modelLetGo, showReading, wireLoading } from "./app/loading.js";
import { drawModels, modelLoaded, wireSavedModels } from "./app/saved_models.js";
import { hideModel, showInspector, showModel, useCards, wireModelView } from "./app/model_view.js";
import { drawSettings, showHeap, showWorkers, useRules, wireSettings, workersWanted } from "./app/settings_form.js";
import { hideProgress, replying, setPhase, settle, showError, showProgress, status, wireStatus } from "./app/status.js";
import { drawStructure, structureChecked } from "./app/structure.js";
import { toolsChecked } from "./app/tools_panel.js";
import { worker } from "./app/worker_client.js";
import { boundedName } from "./app/format.js";
import { openTrace, showTrace, traceFailed } from "./app/trace_view.js";

// What the worker posts, by type (pyengine/browser/worker.py describes each one; app/messages.js types it).
/** @type {import("./app/messages.js").Handlers} */
const handlers = {
  boot(msg) { showProgress(msg.stage, null); },
  stage(msg) { showProgress(msg.stage, null); }, // a step of a load with no byte count (the helper workers)
  booted(msg) { // Python is up: msg.page holds what the settings and the card are drawn from
    hideProgress();
    drawSettings(msg.page);
    drawStructure(msg.page);
    useCards(msg.page.cards);
    useStopWords(msg.page.stop_words);
    usePageWords(msg.page);
    if (status.phase === "starting") settle();
  },
  "boot-error"(msg) {
    hideProgress();
    showError(msg.message);
    setPhase("failed");
  },
  progress: showReading,
  unloaded() { // the model loaded before is gone; the new one is on its way
    status.hasModel = false;
    modelLetGo();
    hideModel();
  },
  model(msg) {
    msg.card.name = boundedName(msg.card.name); // the file's general.name: data, of any length
    hideProgress();
    status.hasModel = true;
    showModel(msg.card, msg.inspect);
    useRules(msg.settings);
    useMessages(chat.messages); // the conversation goes on with the new model
    useModelName(msg.card.name);
    loadSucceeded(msg.card.name);
    useThinkingSwitch(msg.thinking);
    modelLoaded(msg.card.name);
    setStatsLine(`loaded in ${msg.seconds.toFixed(1)} s`);
    showWorkers(msg.workers);
    setPhase("ready");
    el.prompt.focus();
  },
  inspect(msg) { // a file whose architecture pyengine does not run: not loaded, but its parts shown
    showInspector(msg.inspect);
  },
  "load-stopped"(msg) { // Stop during a load (cross-origin isolated): the model before stays, if it got that far
    hideProgress();
    status.hasModel = msg.has_model;
    if (!msg.has_model) hideModel();
    setStatsLine("load stopped");
    settle();
  },
  restarted() { // the worker was started again to end a load (not cross-origin isolated)
    hideProgress();
    status.hasModel = false;
    hideModel();
    setStatsLine("load stopped");
    setPhase("starting");
  },
  checked,
  started,
  refused,
  "structure-checked": structureChecked,
  "tools-checked": toolsChecked,
  piece(msg) { addPiece(msg.text, msg.tokens); },
  done(msg) {
    replyDone(msg.stopped, msg.stats, msg);
    replyEnded();
    showStats(msg.stats);
    showHeap(msg.heap);
    if (replying()) settle();
  },
  traced(msg) { showTrace(msg.trace, msg.back); },
  cleared() { // the worker forgot its conversation (the page's own is the chat shown: chats.js)
    setStatsLine("");
  },
  error(msg) {
    if (msg.during === "trace" && traceFailed(msg.message)) return;
    if (msg.during === "load") loadFailed(msg.message);
    else showError(msg.message);
    if (msg.during === "check") checkFailed();
    if (msg.during === "chat") {
      if (!chatFailed()) offerAgain(replyFailed(msg.message));
      replyEnded();
    }
    if (msg.during === "load") hideProgress();
    if (msg.during === "load" || replying()) settle();
  },
};

// Why a token's step cannot be looked inside, by which reply it is of (chat_view.js wireChatView).
const TRACE_REFUSED = {
  writing: "The reply is still being written: look inside its tokens once it has ended.",
  other: "Only the tokens of the last reply, written in this chat since the model was loaded, can be looked inside.",
};

let afterReply = null; // what waits for the reply running to end (New chat pressed during it)

function freshChat() {
  worker.newChat();
  startNewChat();
}

function replyEnded() {
  replyOver();
  const next = afterReply;
  afterReply = null;
  next?.();
}

function workerFailed(message) {
  showError(`the worker failed: ${message}`);
  setPhase("failed");
}

function start() {
  setPhase("starting");
  wireTheme();
  wireLayout();
  wireStatus();
  wireLoading();
  wireSavedModels();
  wireComposer(() => { // New chat: after the reply running, which it stops, has joined its own chat
    if (replying()) afterReply = freshChat;
    else freshChat();
  });
  wireChatView((span, back, record, which) => {
    openTrace(span, record, back);
    if (which === "last" && status.hasModel) worker.trace(back, record.id);
    else traceFailed(TRACE_REFUSED[which] ?? TRACE_REFUSED.other);
  });
  wireTurns(request, sendable, saveChat);
  wireChats();
  wireTabs(otherTabChanged, drawModels);
  wireModelView();
  wireSettings(settingEdited);
  worker.start(handlers, workerFailed, workersWanted());
  findDemo();
  if ("serviceWorker" in navigator) {
    navigator.serviceWorker.register("./sw.js").catch((err) => console.warn("pyengine: no service worker:", err));
  }
}

start();
