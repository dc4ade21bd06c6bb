// @ts-check
// The Theme setting: "system" follows the system's colour scheme (prefers-color-scheme), "light" and
// "dark" pick one. It belongs to this browser, not to a chat, so it is kept in localStorage beside the
// chat ids, and set as data-theme on <html>, where styles.css reads it (its colours are light-dark() pairs).
import { el } from "./dom.js";

const KEY = "pyengine.theme"; // localStorage: "light" or "dark"; absent for "system"
const THEMES = ["system", "light", "dark"];

function useTheme(theme) {
  if (theme === "system") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
}

export function wireTheme() {
  const kept = localStorage.getItem(KEY);
  const theme = THEMES.includes(kept) ? kept : "system";
  el.theme.value = theme;
  useTheme(theme);
  el.theme.addEventListener("change", () => {
    const chosen = THEMES.includes(el.theme.value) ? el.theme.value : "system";
    if (chosen === "system") localStorage.removeItem(KEY);
    else localStorage.setItem(KEY, chosen);
    useTheme(chosen);
  });
}
