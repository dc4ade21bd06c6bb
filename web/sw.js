// The service worker: keeps the app and its runtime (page, Pyodide, numpy, the wheels) in the
// Cache API so a reload works with the server stopped. files.json (written by the build)
// lists every file but the models. Requests go to the network first (127.0.0.1, fast) and
// fall back to the cache; a cached response is the server's own, COOP/COEP headers included,
// so the page stays cross-origin isolated offline. Model files (.gguf, 100 MB and more) are
// never cached: a dropped file needs no network, and the demo model needs the server.
const PREFIX = "pyengine-";

self.addEventListener("install", (event) => {
  event.waitUntil((async () => {
    const listing = await (await fetch("files.json", { cache: "no-store" })).json();
    const cache = await caches.open(PREFIX + listing.version);
    await cache.addAll(["./", ...listing.files.map((f) => f.path)]);
    await self.skipWaiting();
  })());
});

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    const names = await caches.keys();
    const newest = await newestCache(names);
    await Promise.all(names.filter((n) => n.startsWith(PREFIX) && n !== newest).map((n) => caches.delete(n)));
    await self.clients.claim();
  })());
});

// The cache filled by the last install (the one whose install finished last is opened last).
async function newestCache(names) {
  const ours = names.filter((n) => n.startsWith(PREFIX));
  return ours[ours.length - 1];
}

self.addEventListener("fetch", (event) => {
  const req = event.request;
  const url = new URL(req.url);
  if (req.method !== "GET" || url.origin !== location.origin || url.pathname.endsWith(".gguf")) return;
  event.respondWith(networkThenCache(event, req));
});

async function networkThenCache(event, req) {
  const name = await newestCache(await caches.keys());
  try {
    const response = await fetch(req);
    if (name && response.status === 200 && !req.headers.has("range")) {
      const copy = response.clone();
      event.waitUntil(caches.open(name).then((cache) => cache.put(req, copy)));
    }
    return response;
  } catch (err) {
    const cached = await caches.match(req, { ignoreSearch: true })
      || (req.mode === "navigate" ? await caches.match("./") : undefined);
    if (cached) return cached;
    throw err;
  }
}
