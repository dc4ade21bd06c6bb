// Models kept in the Origin Private File System: models/<folder>/ holds the model's files as dropped
// (every part of a split model, each a file) and meta.json ({name, files, size, saved}), written last:
// a folder without it is a copy that did not finish, and goes. Writes and deletions hold the Web Lock
// "pyengine-models", so two tabs never write the same folder at once.
const ROOT = "models";
const META = "meta.json";
const LOCK = "pyengine-models";

const models = async () => (await navigator.storage.getDirectory()).getDirectoryHandle(ROOT, { create: true });
const folderOf = (files) => files[0].name.replace(/[^\w.-]+/g, "_").slice(0, 120) || "model";
// fn() under the lock; ifAvailable: only if no one holds it (fn(null) is not called then).
const locked = (fn, ifAvailable = false) => (navigator.locks
  ? navigator.locks.request(LOCK, { ifAvailable }, (lock) => (lock ? fn() : null)) : fn());

export const available = () => Boolean(navigator.storage?.getDirectory);

// {usage, quota, persisted} in bytes (persisted: the browser will not evict the saved models).
export async function storageState() {
  const { usage = 0, quota = 0 } = await navigator.storage.estimate();
  const persisted = navigator.storage.persisted ? await navigator.storage.persisted() : false;
  return { usage, quota, persisted };
}

// The saved models: [{folder, name, files, size, saved}], the newest first; unfinished copies removed.
export async function listModels() {
  const dir = await models();
  const found = [];
  const unfinished = [];
  for await (const [folder, handle] of dir.entries()) {
    if (handle.kind !== "directory") continue;
    try {
      const meta = JSON.parse(await (await (await handle.getFileHandle(META)).getFile()).text());
      found.push({ folder, ...meta });
    } catch {
      unfinished.push(folder);
    }
  }
  if (unfinished.length) { // left by a copy cut short, unless a copy is under way now (it holds the lock)
    await locked(() => Promise.all(unfinished.map((f) => dir.removeEntry(f, { recursive: true }).catch(() => {}))),
      true);
  }
  return found.sort((a, b) => b.saved - a.saved);
}

// Copy ``files`` (one model, all its parts) into OPFS under ``name``; progress(bytesDone, bytesTotal).
// Resolves to the saved entry; asks the browser to keep the storage (navigator.storage.persist()).
export async function saveModel(files, name, progress = () => {}) {
  const size = files.reduce((n, f) => n + f.size, 0);
  const { usage, quota } = await storageState();
  if (quota && usage + size > quota) {
    throw new Error(`it needs ${size} bytes and the browser allows this page ${quota - usage} more`);
  }
  const folder = folderOf(files);
  return locked(async () => {
    const root = await models();
    await root.removeEntry(folder, { recursive: true }).catch(() => {});
    const dir = await root.getDirectoryHandle(folder, { create: true });
    let done = 0;
    try {
      for (const file of files) {
        const out = await (await dir.getFileHandle(file.name, { create: true })).createWritable();
        for (const reader = file.stream().getReader(); ;) {
          const { done: end, value } = await reader.read();
          if (end) break;
          await out.write(value);
          progress((done += value.length), size);
        }
        await out.close();
      }
      const meta = { name, files: files.map((f) => f.name), size, saved: Date.now() };
      const w = await (await dir.getFileHandle(META, { create: true })).createWritable();
      await w.write(JSON.stringify(meta));
      await w.close();
      await navigator.storage.persist?.();
      return { folder, ...meta };
    } catch (err) {
      await root.removeEntry(folder, { recursive: true }).catch(() => {});
      throw err;
    }
  });
}

// The File objects of a saved model, in the order they were dropped (the worker reads them as any File).
export async function modelFiles(entry) {
  const dir = await (await models()).getDirectoryHandle(entry.folder);
  return Promise.all(entry.files.map(async (name) => (await dir.getFileHandle(name)).getFile()));
}

export async function forgetModel(entry) {
  await locked(async () => (await models()).removeEntry(entry.folder, { recursive: true }));
}
