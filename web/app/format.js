// @ts-check
// Numbers as the page shows them: bytes in KiB/MiB/GiB, parameters in M/B, counts with commas.

export function formatBytes(n) {
  if (n == null) return "?";
  const units = ["bytes", "KiB", "MiB", "GiB"];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; i++) n /= 1024;
  return i === 0 ? `${n} bytes` : `${n.toFixed(n < 10 ? 2 : 1)} ${units[i]}`;
}

export function formatCount(n) {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} B`;
  return n >= 1e6 ? `${(n / 1e6).toFixed(1)} M` : `${n}`;
}

export const withCommas = (n) => Number(n).toLocaleString("en-US");

// A name from a model's file or a chat file (general.name, a title) as the page keeps and shows it: text,
// at most NAME_CHARS chars (a file may hold a name of 200 MB), never a half of a surrogate pair.
export const NAME_CHARS = 200;
export const boundedName = (name) => (typeof name === "string" ? name : "").slice(0, NAME_CHARS)
  .replace(/[\uD800-\uDBFF]$/, "");
