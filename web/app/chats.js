// The saved chats (store.js, IndexedDB): the list in the sidebar (open, rename, delete), New chat, and
// export and import. The chat shown is saved whenever its messages, system prompt or settings change,
// so a reload or a browser restart brings every chat back, each with its own system prompt and settings.
import { el, make } from "./dom.js";
import { chatFromJSON, chatToJSON, chatToMarkdown } from "./chat_file.js";
import { readFields, setFields } from "./settings_form.js";
import { status } from "./status.js";
import { chat, useMessages } from "./turns.js";
import { deleteChat, getChat, listChats, newChat, putChat } from "./store.js";
import { announce } from "./tabs.js";

const TITLE_CHARS = 48;    // a chat is named after the start of its first message, until renamed
const LAST = "pyengine.chat"; // localStorage: the id of the chat shown last

let current = newChat();   // the chat shown (saved once it has a message)
let stored = false;        // current is in the store
let modelName = "";
let saveTimer = 0;

const idle = () => status.phase !== "generating" && status.phase !== "stopping";

function note(text) {
  el.chatsNote.textContent = text;
}

// The chat shown, saved (once it has messages or was named); the list drawn again.
export async function saveChat() {
  clearTimeout(saveTimer);
  Object.assign(current, { messages: chat.messages, system: el.systemPrompt.value,
    settings: readFields().settings, updated: Date.now() });
  if (modelName && chat.messages.length) current.model = modelName;
  if (!current.title && chat.messages.length) current.title = chat.messages[0].content.trim().slice(0, TITLE_CHARS);
  if (!current.messages.length && !stored) return;
  try {
    await putChat(current);
    announce({ type: "chats", id: current.id });
    stored = true;
    localStorage.setItem(LAST, current.id);
    note("");
  } catch (err) {
    note(`This chat is not saved: ${err.message || err}`);
  }
  await drawList();
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
  useMessages(record.messages.map((m) => ({ ...m })));
  localStorage.setItem(LAST, record.id);
}

// An empty chat shown, with the system prompt and settings as they are (saved once it has a message).
function showBlank() {
  current = newChat({ system: el.systemPrompt.value, settings: readFields().settings });
  stored = false;
  useMessages([]);
}

// New chat (once no reply runs: app.js waits for the one stopped).
export async function startNewChat() {
  if (current.messages.length) await saveChat();
  showBlank();
  await drawList();
}

async function openChat(record) {
  if (!idle() || record.id === current.id) return;
  await saveChat();
  show(record);
  await drawList();
}

async function removeChat(record) {
  await deleteChat(record.id);
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
    record.title = input.value.trim() || record.title;
    record.named = true;
    await putChat(record);
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
  const open = button(record.title || "Untitled chat", `Open the chat ${record.title}`, () => openChat(record),
    "chat-open");
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
  try {
    const data = chatFromJSON(await file.text(), file.name);
    await saveChat();
    show(newChat({ ...data, title: data.title || file.name.replace(/\.json$/i, ""), named: true }), false);
    await saveChat();
    const n = data.messages.length;
    note(`Imported ${file.name}: ${n} message${n === 1 ? "" : "s"}.`);
  } catch (err) {
    note(`Not imported: ${err.message}`);
  }
}

// Another tab saved or deleted chat ``id``: the list drawn again, and the chat shown read again if it is
// that one (unless a reply runs here: this tab's own save comes after it).
export async function otherTabChanged(id) {
  if (id === current.id && idle()) {
    const record = await getChat(id);
    if (record) show(record);
    else {
      stored = false;
      note("This chat was deleted in another tab: it is saved again if you go on with it.");
    }
  }
  await drawList();
}

// The model loaded: its name goes with the chats that use it.
export const useModelName = (name) => { modelName = name; };

// The chat shown last comes back (or the newest); then every change is saved.
export async function wireChats() {
  el.systemPrompt.addEventListener("input", saveSoon);
  el.settings.addEventListener("input", saveSoon);
  el.exportJson.addEventListener("click", () => download(fileName("json"), "application/json", chatToJSON(current)));
  el.exportMarkdown.addEventListener("click", () => download(fileName("md"), "text/markdown", chatToMarkdown(current)));
  el.importChat.addEventListener("click", () => el.importFile.click());
  el.importFile.addEventListener("change", () => {
    if (el.importFile.files[0] && idle()) importFile(el.importFile.files[0]);
    el.importFile.value = "";
  });
  try {
    const all = await listChats();
    const last = all.find((c) => c.id === localStorage.getItem(LAST)) || all[0];
    if (last) show(last);
  } catch (err) {
    note(`The saved chats cannot be read: ${err.message || err}`);
  }
  await drawList();
}
