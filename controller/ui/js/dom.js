// A tiny DOM builder. Text always goes in as text nodes, never as HTML, so nothing the API returns
// (topic names, failure reasons) can inject markup.

/**
 * h("li", {class: "cell", "data-testid": "x", onclick: fn}, "text", child, [more, children])
 * Attributes with a function value starting with "on" become event listeners; `false`/`null`
 * attributes are left out; children may be strings, numbers, nodes, arrays, null or false.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/**
 * Replaces the children of `container`, keeping keyboard focus on the element with the same
 * `data-key` if one had it (the panels re-render every second; focus must survive that). Nothing is
 * replaced while a button in it is pressed: a button replaced between its mousedown and mouseup gets
 * no click, and the operator's click would be lost (the next render comes with the next poll).
 */
export function replaceChildren(container, ...nodes) {
  if (container.querySelector(":active")) return;
  const focused = document.activeElement;
  const key = focused && container.contains(focused) ? focused.getAttribute("data-key") : null;
  container.replaceChildren(...nodes.flat());
  if (key) container.querySelector(`[data-key="${CSS.escape(key)}"]`)?.focus();
}

/** "12:03:04" in the viewer's time zone. */
export function clockTime(ms) {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

/** "4 s ago", "3 min ago", "2 h ago". */
export function ago(ms, now = Date.now()) {
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 120) return `${s} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}
