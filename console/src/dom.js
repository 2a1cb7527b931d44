// Small DOM helpers: build elements, format sizes and times.

/** An element: `el("button", {class: "x", onclick}, "text", child...)`. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

/** `1.5 MiB`. */
export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

/** A local time of an RFC 3339 string. */
export function time(s) {
  return s ? new Date(s).toLocaleString() : "–";
}

/** Shows an error (an ApiError or any other) in the status line. */
export function showError(err) {
  const line = document.getElementById("status");
  if (line) {
    line.textContent = String(err.message || err);
    line.className = "error";
  }
  console.error(err);
}

/** Shows a passing note in the status line. */
export function showNote(text) {
  const line = document.getElementById("status");
  if (line) {
    line.textContent = text;
    line.className = "note";
  }
}
