// @ts-check
// Several tabs of the page: the first one open holds the Web Lock "pyengine-tab"; a tab that finds it
// taken says so plainly in a banner (it works all the same, with its own model in its own memory) until
// the first one closes. Tabs tell each other through the BroadcastChannel "pyengine" when the saved chats
// or models change, so every tab's lists stay true; a chat record is only ever written whole (store.js)
// and model folders under their own lock (opfs.js), so two tabs never leave half of either.
import { el } from "./dom.js";

const LOCK = "pyengine-tab";
const channel = "BroadcastChannel" in self ? new BroadcastChannel("pyengine") : null;

export const SECOND_TAB = "pyengine is open in another tab too. This tab works as well: it loads its own copy "
  + "of a model into its own memory (close a tab if memory runs short). Saved chats and models are shared: "
  + "a change in one tab shows in the other, and the chat open in both is kept as the tab that wrote last left it.";

// Tell the other tabs: {type: "chats", id} (a chat saved or deleted) or {type: "models"}.
export const announce = (msg) => channel?.postMessage(msg);

// onChats(id): another tab saved or deleted chat id; onModels(): it saved or forgot a model.
export function wireTabs(onChats, onModels) {
  if (channel) {
    channel.onmessage = (e) => {
      if (e.data?.type === "chats") onChats(e.data.id);
      else if (e.data?.type === "models") onModels();
    };
  }
  if (!navigator.locks) return;
  navigator.locks.request(LOCK, { ifAvailable: true }, (lock) => {
    if (lock) return new Promise(() => {}); // held while this tab lives
    el.tabNote.textContent = SECOND_TAB;
    el.tabNote.hidden = false;
    // the first tab's lock comes to this one when that tab closes
    navigator.locks.request(LOCK, () => {
      el.tabNote.hidden = true;
      return new Promise(() => {});
    });
    return null;
  });
}
