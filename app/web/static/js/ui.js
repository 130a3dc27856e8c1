// Shared page state and small DOM helpers.

import { explain } from "./errors.js";

export const state = {
  collection: null, // stats of the selected collection (GET /v1/collections/{name})
  encoders: new Map(), // name -> GET /v1/encoders row
  query: null, // the query whose results are shown
};

// el("button", {type: "button", onclick: f, dataset: {id: 1}}, "text", child, ...)
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null) continue;
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "ariaLabel") node.setAttribute("aria-label", value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node[key] = value;
  }
  node.append(...children.filter((child) => child !== null && child !== undefined));
  return node;
}

// Show a failed action in the banner: what failed, the service's reason, and what to do.
export function showError(what, exc) {
  const banner = document.getElementById("banner");
  banner.textContent = exc ? explain(what, exc) : what;
  banner.hidden = false;
  if (exc && exc.status === 401) document.getElementById("api-key").focus();
  if (exc && exc.status === 404) document.dispatchEvent(new CustomEvent("recall:stale"));
}

// Ask before something that cannot be undone; resolves true only for the confirming button.
// A <dialog> opened with showModal keeps keyboard focus inside it and closes on Escape.
export function confirmAction(message, confirmLabel) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-message").textContent = message;
  const yes = document.getElementById("confirm-yes");
  yes.textContent = confirmLabel;
  const opener = document.activeElement;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      if (opener && document.contains(opener)) opener.focus();
      resolve(dialog.returnValue === "yes");
    }, { once: true });
    dialog.returnValue = "";
    dialog.showModal();
    document.getElementById("confirm-no").focus(); // the safe choice has the focus
  });
}

export function clearError() {
  const banner = document.getElementById("banner");
  banner.hidden = true;
  banner.textContent = "";
}

// Accept files dropped on `zone` and hand them to `onFiles`; the zone also holds a file input.
export function dropZone(zone, onFiles) {
  zone.addEventListener("dragover", (event) => {
    event.preventDefault();
    zone.classList.add("over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("over");
    if (event.dataTransfer.files.length) onFiles([...event.dataTransfer.files]);
  });
  const input = zone.querySelector("input[type=file]");
  input.addEventListener("change", () => {
    if (input.files.length) onFiles([...input.files]);
    input.value = ""; // choosing the same file again should search again
  });
  // the zone itself is focusable: Enter or Space opens the file picker
  zone.addEventListener("keydown", (event) => {
    if (event.target === zone && (event.key === "Enter" || event.key === " ")) {
      event.preventDefault();
      input.click();
    }
  });
}
