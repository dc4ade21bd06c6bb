// @ts-check
// Models kept in the Origin Private File System: models/<id>/ holds one saved model, under a random id
// (never its file's name: two files of one name, or names that differ only outside ASCII, are two saves),
// its files as dropped (every part of a split model, each a file) and meta.json ({name, files, sizes,
// size, modified, saved}). meta.json is written last and deleted first: a folder without it is a copy
// that did not finish, and goes; a folder whose files do not add up to its meta's sizes (cut short) is
// never listed. Every listing, write and deletion holds the Web Lock "pyengine-models", so two tabs never
// touch the same folder at once. Folders of the older scheme (named after the file, meta without sizes)
// are listed and loaded the same way, checked against their total size.
import { boundedName } from "./format.js";

const ROOT = "models";
const META = "meta.json";
const LOCK = "pyengine-models";

const models = async () => (await navigator.storage.getDirectory()).getDirectoryHandle(ROOT, { create: true });
const locked = (fn) => (navigator.locks ? navigator.locks.request(LOCK, fn) : fn());

export const available = () => Boolean(navigator.storage?.getDirectory);

// {usage, quota, persisted} in bytes (persisted: the browser will not evict the saved models).
export async function storageState() {
  const { usage = 0, quota = 0 } = await navigator.storage.estimate();
  const persisted = navigator.storage.persisted ? await navigator.storage.persisted() : false;
  return { usage, quota, persisted };
}

// The sizes of a folder's files, in bytes, as meta lists them (a missing file: -1).
async function sizesOf(dir, files) {
  return Promise.all(files.map((name) => dir.getFileHandle(name).then((h) => h.getFile()).then((f) => f.size,
    (err) => (err.name === "NotFoundError" ? -1 : Promise.reject(err)))));
}

// Why a folder's files do not match its meta ("" when they do).
function cutShort(meta, sizes) {
  const total = sizes.reduce((n, s) => n + Math.max(s, 0), 0);
  const partsDiffer = meta.sizes ? meta.sizes.some((s, i) => s !== sizes[i]) : false;
  if (!sizes.includes(-1) && !partsDiffer && total === meta.size) return "";
  return `the saved copy holds ${total} of its ${meta.size} bytes`;
}

// A folder's meta, checked: null for a copy that did not finish (no meta.json, not JSON) or was cut short.
async function readMeta(dir) {
  let meta;
  try {
    meta = JSON.parse(await (await (await dir.getFileHandle(META)).getFile()).text());
  } catch (err) {
    if (err.name === "NotFoundError" || err instanceof SyntaxError) return null;
    throw err;
  }
  const listed = (v) => Array.isArray(v) && v.length === meta.files.length;
  if (!Array.isArray(meta?.files) || typeof meta.size !== "number" || (meta.sizes && !listed(meta.sizes))
    || (meta.modified && !listed(meta.modified))) return null;
  return cutShort(meta, await sizesOf(dir, meta.files)) ? null : { ...meta, name: boundedName(meta.name) };
}

// A folder deleted, meta.json first (a folder that loses its files is then never listed as complete).
async function remove(root, folder) {
  const dir = await root.getDirectoryHandle(folder);
  try {
    await dir.removeEntry(META);
  } catch (err) {
    if (err.name !== "NotFoundError") throw err;
  }
  await root.removeEntry(folder, { recursive: true });
}

// Under the lock: the complete folders' entries, and the unfinished ones removed. Resolves to
// {models: [{folder, name, files, size, saved, ...}] the newest first, failed: why a removal failed, or ""}.
async function listAndClean(root) {
  const found = [];
  const failed = [];
  for await (const [folder, handle] of root.entries()) {
    if (handle.kind !== "directory") continue;
    const meta = await readMeta(handle);
    if (meta) found.push({ ...meta, folder });
    else await remove(root, folder).catch((err) => failed.push(`${folder}: ${err.message || err}`));
  }
  const why = failed.length ? `an unfinished copy could not be removed (${failed.join("; ")})` : "";
  return { models: found.sort((a, b) => b.saved - a.saved), failed: why };
}

// The saved models: {models, failed} (listAndClean).
export const listModels = () => locked(async () => listAndClean(await models()));

// The saved entry that holds ``files`` (the same names, sizes and times), if any.
export function savedAs(entries, files) {
  const names = files.map((f) => f.name);
  return entries.find((e) => JSON.stringify(e.files) === JSON.stringify(names)
    && (e.sizes ? e.sizes.every((s, i) => s === files[i].size) : e.size === files.reduce((n, f) => n + f.size, 0))
    && (!e.modified || e.modified.every((t, i) => t === files[i].lastModified)));
}

// One file copied into ``dir``; a copy that fails is aborted (its bytes do not keep the quota).
/** @param {FileSystemDirectoryHandle} dir @param {File} file @param {(bytes: number) => void} progress */
async function copyFile(dir, file, progress) {
  const out = await (await dir.getFileHandle(file.name, { create: true })).createWritable();
  try {
    for (const reader = file.stream().getReader(); ;) {
      const { done, value } = await reader.read();
      if (done) break;
      await out.write(value);
      progress(value.length);
    }
    await out.close();
  } catch (err) {
    await out.abort().catch(() => {}); // an errored stream refuses abort: it keeps nothing either way
    throw err;
  }
}

// Copy ``files`` (one model, all its parts) into OPFS under ``name``; progress(bytesDone, bytesTotal).
// Resolves to the saved entry; asks the browser to keep the storage (navigator.storage.persist()).
// Unfinished copies are removed first, and a failed removal stops the save.
/** @param {File[]} files @param {string} name @param {(done: number, total: number) => void} [progress] */
export async function saveModel(files, name, progress = () => {}) {
  const size = files.reduce((n, f) => n + f.size, 0);
  const { usage, quota } = await storageState();
  if (quota && usage + size > quota) {
    throw new Error(`it needs ${size} bytes and the browser allows this page ${quota - usage} more`);
  }
  return locked(async () => {
    const root = await models();
    const { failed } = await listAndClean(root);
    if (failed) throw new Error(failed);
    const folder = crypto.randomUUID();
    const dir = await root.getDirectoryHandle(folder, { create: true });
    let done = 0;
    try {
      for (const file of files) await copyFile(dir, file, (n) => progress((done += n), size));
      const meta = { name: boundedName(name), files: files.map((f) => f.name), sizes: files.map((f) => f.size), size,
        modified: files.map((f) => f.lastModified), saved: Date.now() };
      await copyFile(dir, new File([JSON.stringify(meta)], META), () => {});
      await navigator.storage.persist?.();
      return { folder, ...meta };
    } catch (err) {
      try {
        await root.removeEntry(folder, { recursive: true });
      } catch (again) {
        throw new Error(`${err.message || err}; the unfinished copy is not removed yet (${again.message || again})`);
      }
      throw err;
    }
  });
}

// The File objects of a saved model, in the order they were dropped (the worker reads them as any File);
// an Error if they no longer add up to what was saved.
export async function modelFiles(entry) {
  const dir = await (await models()).getDirectoryHandle(entry.folder);
  const files = await Promise.all(entry.files.map(async (name) => (await dir.getFileHandle(name)).getFile()));
  const why = cutShort(entry, files.map((f) => f.size));
  if (why) throw new Error(`${why}: forget it and load the file again`);
  return files;
}

export const forgetModel = (entry) => locked(async () => remove(await models(), entry.folder));
