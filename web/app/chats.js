// @ts-check
// The saved chats (store.js, IndexedDB): the list in the sidebar (open, rename, delete), New chat, and
// export and import. The chat shown is saved whenever its messages, system prompt or settings change,
// so a reload or a browser restart brings every chat back, each with its own system prompt, settings,
// Structured output and tools.
import { el, make } from "./dom.js";
import { chatToJSON, chatToMarkdown, readChatFile } from "./chat_file.js";
import { boundedName } from "./format.js";
import { readFields, setFields } from "./settings_form.js";
import { readStructure, setStructure, wireStructure } from "./structure.js";
import { readTools, setTools, wireTools } from "./tools_panel.js";
import { status } from "./status.js";
import { chat, useMessages } from "./turns.js";
import { deleteChat, getChat, listChats, newChat, putChat } from "./store.js";
import { announce } from "./tabs.js";

const TITLE_CHARS = 48;    // a chat is named after the start of its first message, until renamed
const LAST = "pyengine.chat"; // localStorage: the id of the chat shown last
// localStorage: the id of the chat being drawn, set before and cleared after; found at a start, it names
// a chat whose drawing froze the page (the tab was closed or killed first), which then goes to FROZE:
// the ids of such chats, never opened at a start again (a chat drawn whole once more leaves it).
const DRAWING = "pyengine.drawing";
const FROZE = "pyengine.froze";

let current = newChat();   // the chat shown (saved once it has a message)
let stored = false;        // current is in the store
let modelName = "";
let saveTimer = 0;

const idle = () => status.phase !== "generating" && status.phase !== "stopping";

function note(text) {
  el.chatsNote.textContent = text;
}

// The chat shown, saved (once it has messages or was named); the list drawn again. Resolves to why it
// is not saved ("" once it is).
export async function saveChat() {
  clearTimeout(saveTimer);
  Object.assign(current, { messages: chat.messages, system: el.systemPrompt.value,
    settings: readFields().settings, structure: readStructure(), tools: readTools(), updated: Date.now() });
  if (modelName && chat.messages.length) current.model = modelName;
  if (!current.title && chat.messages.length) current.title = chat.messages[0].content.trim().slice(0, TITLE_CHARS);
  if (!current.messages.length && !stored) return "";
  let failed = "";
  try {
    await putChat(current);
    announce({ type: "chats", id: current.id });
    stored = true;
    localStorage.setItem(LAST, current.id);
  } catch (err) {
    failed = `This chat is not saved: ${err.message || err}`;
  }
  note(failed);
  await drawList();
  return failed;
}

// A change to the system prompt or a setting: saved a moment later (typing is not a write a key).
const saveSoon = () => {
  clearTimeout(saveTimer);
  saveTimer = setTimeout(saveChat, 300);
};

function show(record, saved = true) {
  current = record;
  stored = saved;
  el.systemPrompt.value = record.system;
  setFields(record.settings);
  setStructure(record.structure);
  setTools(record.tools);
  localStorage.setItem(DRAWING, record.id);
  useMessages(record.messages.map((m) => ({ ...m }))); // drawn and laid out (scrolled to its end)
  localStorage.removeItem(DRAWING);
  frozen(record.id, false);
  localStorage.setItem(LAST, record.id);
}

// The ids of the chats whose drawing froze the page.
function frozenIds() {
  try {
    return new Set(JSON.parse(localStorage.getItem(FROZE) || "[]"));
  } catch {
    return new Set();
  }
}

// Chat ``id`` marked as one whose drawing froze the page (froze) or not.
function frozen(id, froze) {
  const ids = frozenIds();
  if (froze === ids.has(id)) return;
  if (froze) ids.add(id);
  else ids.delete(id);
  if (ids.size) localStorage.setItem(FROZE, JSON.stringify([...ids]));
  else localStorage.removeItem(FROZE);
}

// An empty chat shown, with the system prompt and settings as they are (saved once it has a message).
function showBlank() {
  current = newChat({ system: el.systemPrompt.value, settings: readFields().settings, structure: readStructure(),
    tools: readTools() });
  stored = false;
  useMessages([]);
}

// New chat (once no reply runs: app.js waits for the one stopped). The chat shown stays if it cannot be
// saved (the note says why).
export async function startNewChat() {
  if (current.messages.length && await saveChat()) return;
  showBlank();
  await drawList();
}

async function openChat(record) {
  if (!idle() || record.id === current.id) return;
  if (await saveChat()) return;
  show(record);
  await drawList();
}

async function removeChat(record) {
  try {
    await deleteChat(record.id);
  } catch (err) {
    return void note(`The chat ${record.title} is not deleted: ${err.message || err}`);
  }
  announce({ type: "chats", id: record.id });
  if (record.id === current.id) showBlank();
  await drawList();
}

function renameChat(li, record) {
  const input = make("input", "rename");
  input.value = record.title;
  input.setAttribute("aria-label", `New name for the chat ${record.title}`);
  li.querySelector(".chat-open").replaceWith(input);
  input.focus();
  input.addEventListener("keydown", async (e) => {
    if (e.key === "Escape") return void drawList();
    if (e.key !== "Enter") return;
    const renamed = { ...record, title: boundedName(input.value.trim()) || record.title, named: true };
    try {
      await putChat(renamed);
    } catch (err) {
      await drawList();
      return void note(`The chat ${record.title} is not renamed: ${err.message || err}`);
    }
    Object.assign(record, renamed);
    announce({ type: "chats", id: record.id });
    if (record.id === current.id) Object.assign(current, { title: record.title, named: true });
    await drawList();
  });
}

function button(text, name, onClick, className = "") {
  const b = make("button", className, text);
  b.type = "button";
  b.setAttribute("aria-label", name);
  b.addEventListener("click", onClick);
  return b;
}

// Delete asks once more: the first click turns the button into "Delete?" for a few seconds.
function deleteButton(record) {
  const b = button("Delete", `Delete the chat ${record.title}`, () => {
    if (b.dataset.armed) return void removeChat(record);
    b.dataset.armed = "1";
    b.textContent = "Delete?";
    setTimeout(() => { delete b.dataset.armed; b.textContent = "Delete"; }, 4000);
  });
  return b;
}

function chatItem(record) {
  const li = make("li", "chat-item");
  const title = record.title || "Untitled chat";
  const open = button(title, `${title}: open this chat`, () => openChat(record), "chat-open");
  if (record.id === current.id) open.setAttribute("aria-current", "true");
  li.append(open, button("Rename", `Rename the chat ${record.title}`, () => renameChat(li, record)),
    deleteButton(record));
  return li;
}

export async function drawList() {
  try {
    const all = await listChats();
    el.chatList.replaceChildren(...all.map(chatItem));
    el.chatList.dataset.count = all.length;
  } catch (err) {
    note(`The saved chats cannot be read: ${err.message || err}`);
  }
}

function download(name, type, text) {
  const a = make("a");
  a.href = URL.createObjectURL(new Blob([text], { type }));
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

const fileName = (ext) => `${(current.title || "chat").replace(/[^\w.-]+/g, "_").slice(0, 60)}.${ext}`;

async function importFile(file) {
  let data;
  try {
    data = await readChatFile(file);
  } catch (err) {
    return void note(`Not imported: ${err.message}`);
  }
  const before = await saveChat();
  if (before) return void note(`Not imported (the chat shown would be lost): ${before}`);
  const title = data.title || boundedName(file.name.replace(/\.json$/i, ""));
  const record = newChat({ ...data, title, named: true });
  let failed = "";
  try {
    await putChat(record);   // saved before it is drawn: a page closed while a long chat draws keeps it
    announce({ type: "chats", id: record.id });
  } catch (err) {
    failed = ` This chat is not saved: ${err.message || err}`;
  }
  show(record, !failed);
  await drawList();
  const n = data.messages.length;
  note(`Imported ${file.name}: ${n} message${n === 1 ? "" : "s"}.${failed}`);
}

// Another tab saved or deleted chat ``id``: the list drawn again, and the chat shown read again if it is
// that one (unless a reply runs here: this tab's own save comes after it).
export async function otherTabChanged(id) {
  if (id === current.id && idle()) {
    try {
      const record = await getChat(id);
      if (record) show(record);
      else {
        stored = false;
        note("This chat was deleted in another tab: it is saved again if you go on with it.");
      }
    } catch (err) {
      note(`This chat was changed in another tab and cannot be read again: ${err.message || err}`);
    }
  }
  await drawList();
}

// The model loaded: its name goes with the chats that use it.
export const useModelName = (name) => { modelName = boundedName(name); };

// The chat shown last comes back (or the newest); then every change is saved.
export async function wireChats() {
  el.systemPrompt.addEventListener("input", saveSoon);
  el.settings.addEventListener("input", saveSoon);
  wireStructure(saveSoon);
  wireTools(saveSoon);
  el.exportJson.addEventListener("click", () => download(fileName("json"), "application/json", chatToJSON(current)));
  el.exportMarkdown.addEventListener("click", () => download(fileName("md"), "text/markdown", chatToMarkdown(current)));
  el.importChat.addEventListener("click", () => el.importFile.click());
  el.importFile.addEventListener("change", () => {
    if (el.importFile.files[0] && idle()) importFile(el.importFile.files[0]);
    el.importFile.value = "";
  });
  const froze = localStorage.getItem(DRAWING);
  if (froze) frozen(froze, true);
  localStorage.removeItem(DRAWING);
  try {
    const all = await listChats();
    const last = all.find((c) => c.id === localStorage.getItem(LAST)) || all[0];
    const stuck = all.find((c) => c.id === froze) || (last && frozenIds().has(last.id) ? last : null);
    if (stuck) {
      note(`The chat ${boundedName(stuck.title) || "Untitled chat"} is not opened: the page stopped answering `
        + "while it was drawn last time. It is in the list: open it, export it or delete it.");
    } else if (last) show(last);
  } catch (err) {
    note(`The saved chats cannot be read: ${err.message || err}`);
  }
  await drawList();
}
