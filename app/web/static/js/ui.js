// Shared page state and small DOM helpers.

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

export function showError(message, status) {
  const banner = document.getElementById("banner");
  banner.textContent = status === 401
    ? `${message} Enter the key in the API key field above and save it.`
    : message;
  banner.hidden = false;
  if (status === 401) document.getElementById("api-key").focus();
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
}
