// @ts-check
// The service worker: keeps this build's files (the page, Pyodide, numpy, the wheels, the page's libraries)
// in the Cache API so a reload works with the server stopped.
//
// The build writes BUILD into static/sw.js: its version and its file list (every file but the models and
// this one), so each build is a new service worker and the browser installs it on the next visit.
// - install: the cache "pyengine-build-<version>" is filled with exactly those files, as the server sent
//   them (COOP/COEP headers included, so the page stays cross-origin isolated offline);
// - activate: pyengine's caches of other builds are removed; any other cache on this origin is left alone;
// - fetch: only a GET of a listed file (or of the page itself) is answered, from the network first
//   (127.0.0.1, fast) and from this build's cache when the network fails. Nothing else is touched: another
//   app on the same origin, a model (.gguf, never cached: a dropped file needs no network), a range request.
/** @type {{version: string, files: string[]}} */
const BUILD = { version: "dev", files: [] }; // written by build_scripts/build_static.py
// This worker as a service worker (the checker knows a worker's globals, not a service worker's).
const sw = /** @type {ServiceWorkerGlobalScope} */ (/** @type {unknown} */ (self));
const PREFIX = "pyengine-build-";
const CACHE = PREFIX + BUILD.version;
const SCOPE = new URL(sw.registration.scope);
const LISTED = new Set(["", ...BUILD.files]); // paths under the scope; "" is the page itself

sw.addEventListener("install", (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    await cache.addAll([...LISTED].map((path) => new URL(path, SCOPE).href));
    await sw.skipWaiting();
  })());
});

sw.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    const old = (await caches.keys()).filter((name) => name.startsWith(PREFIX) && name !== CACHE);
    await Promise.all(old.map((name) => caches.delete(name)));
    await sw.clients.claim();
  })());
});

// The listed path a request names ("" for the page), or null for any other request.
function listedPath(req) {
  const url = new URL(req.url);
  if (req.method !== "GET" || url.origin !== SCOPE.origin || req.headers.has("range")) return null;
  if (!url.pathname.startsWith(SCOPE.pathname)) return null;
  let path;
  try {
    path = decodeURIComponent(url.pathname.slice(SCOPE.pathname.length));
  } catch {
    return null; // a malformed escape names no file of ours
  }
  return LISTED.has(path) ? path : null;
}

sw.addEventListener("fetch", (event) => {
  const path = listedPath(event.request);
  if (path !== null) event.respondWith(networkThenCache(event.request, path));
});

async function networkThenCache(req, path) {
  try {
    return await fetch(req);
  } catch (err) {
    const cached = await (await caches.open(CACHE)).match(new URL(path, SCOPE).href);
    if (cached) return cached;
    throw err;
  }
}
