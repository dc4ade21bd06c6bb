// @ts-check
// The chats kept in the browser (IndexedDB "pyengine", object store "chats", one record a chat):
// {id, title, named (renamed by hand), messages: [{role, content, note?}], system, settings: name -> the
// text typed, model, created, updated (ms since 1970)}. Every call opens its own transaction; a write is done when its
// promise resolves (the transaction committed), so a reload right after loses nothing.
const DB = "pyengine";
const VERSION = 1;
const CHATS = "chats";

let opened = null; // the connection's promise; dropped when it fails or closes, so the next call opens again

function open() {
  if (opened) return opened;
  const promise = new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, VERSION);
    req.onupgradeneeded = () => req.result.createObjectStore(CHATS, { keyPath: "id" });
    req.onsuccess = () => {
      const db = req.result;
      // a newer page upgrades the database in another tab: this connection gives way, the next call opens anew
      db.onversionchange = () => { db.close(); forget(promise); };
      db.onclose = () => forget(promise); // the browser closed it (the site's data cleared)
      resolve(db);
    };
    req.onerror = () => reject(req.error);
    req.onblocked = () => reject(new Error("another tab holds an older version of the saved chats open"));
  });
  promise.catch(() => forget(promise));
  opened = promise;
  return promise;
}

function forget(promise) {
  if (opened === promise) opened = null;
}

// Run fn(store) in a transaction; resolves to the value of the request fn returns, once committed.
async function run(mode, fn) {
  const db = await open();
  return new Promise((resolve, reject) => {
    const tx = db.transaction(CHATS, mode);
    const req = fn(tx.objectStore(CHATS));
    tx.oncomplete = () => resolve(req?.result);
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error || new Error("the saved chats could not be written"));
  });
}

// Every chat, the newest first.
export async function listChats() {
  const all = await run("readonly", (s) => s.getAll());
  return all.sort((a, b) => b.updated - a.updated);
}

export const getChat = (id) => run("readonly", (s) => s.get(id));
export const putChat = (chat) => run("readwrite", (s) => s.put(chat));
export const deleteChat = (id) => run("readwrite", (s) => s.delete(id));

// A new chat record (not saved yet).
export function newChat(fields = {}) {
  const now = Date.now();
  return { id: crypto.randomUUID(), title: "", messages: [], system: "", settings: {}, model: "",
    created: now, updated: now, ...fields };
}
