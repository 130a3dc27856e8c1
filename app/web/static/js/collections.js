// Creating and deleting collections, and the empty state that offers the demo data.

import { forgetMedia, path, request } from "./api.js";
import { clearError, confirmAction, el, showError, state } from "./ui.js";

// What each shipped encoder is good for, in plain words; the service's own description follows.
const GOOD_FOR = {
  "speech-attn-hash": "Spoken words: finds the same word said by other voices, and every place it is said in a long recording.",
  "sounds-texture": "Everyday sounds (animals, rain, engines, household noises): finds other recordings of the same kind of sound.",
  "sounds-attn-hash": "Everyday sounds, kept for comparison: sounds-texture finds sounds it was not trained on better.",
  "image-text-minilm": "Photos: find them by describing them in a sentence, or by an example image.",
  "audio-baseline": "Any audio, without training: a quick check that finds near-identical sounds; weak across different voices.",
  "image-baseline": "Any images, without training: finds similar colours and textures; no search by sentence.",
};

function $(id) {
  return document.getElementById(id);
}

function modality() {
  return $("create-form").querySelector("input[name=modality]:checked").value;
}

// Fill the encoder menu for the chosen modality, the default preselected, and describe the choice.
export function fillEncoders() {
  const select = $("new-encoder");
  const rows = [...state.encoders.values()].filter((row) => row.modality === modality());
  rows.sort((a, b) => Number(b.default) - Number(a.default) || a.name.localeCompare(b.name));
  select.replaceChildren(...rows.map((row) => el("option", { value: row.name }, row.default ? `${row.name} (default)` : row.name)));
  const preferred = rows.find((row) => row.default) || rows[0];
  if (preferred) select.value = preferred.name;
  describeEncoder();
}

function describeEncoder() {
  const row = state.encoders.get($("new-encoder").value);
  const info = $("encoder-info");
  if (!row) {
    info.textContent = "No encoder for this kind of collection is installed.";
    return;
  }
  // a bring-your-own (ONNX) encoder: where it comes from and under which licence, from its manifest
  const facts = row.family
    ? [`${row.family}`, row.dim && `${row.dim}-d`, row.licence && `licence ${row.licence}`, row.source && `source ${row.source}`,
       row.version && `version ${row.version}`].filter(Boolean).join(" · ")
    : "";
  info.replaceChildren(
    el("strong", {}, GOOD_FOR[row.name] || "Good for: see the description."),
    el("br"),
    el("span", { className: "muted" }, row.description || ""),
    ...(facts ? [el("br"), el("span", { className: "muted" }, facts)] : []));
}

export function openCreate() {
  $("create").hidden = false;
  $("new-collection").setAttribute("aria-expanded", "true");
  fillEncoders();
  $("new-name").focus();
}

function closeCreate() {
  $("create").hidden = true;
  $("new-collection").setAttribute("aria-expanded", "false");
  $("create-form").reset();
}

// `onCreated(name)` selects the new collection; `reload(name)` re-lists collections.
export function wireCollections({ reload }) {
  $("new-collection").addEventListener("click", () => ($("create").hidden ? openCreate() : closeCreate()));
  $("empty-create").addEventListener("click", openCreate);
  $("create-cancel").addEventListener("click", closeCreate);
  for (const radio of $("create-form").querySelectorAll("input[name=modality]")) radio.addEventListener("change", fillEncoders);
  $("new-encoder").addEventListener("change", describeEncoder);
  $("create-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    clearError();
    const body = { name: $("new-name").value.trim(), modality: modality(), encoder: $("new-encoder").value || undefined };
    const description = $("new-description").value.trim();
    if (description) body.description = description;
    try {
      await request("POST", "/v1/collections", { json: body });
    } catch (exc) {
      showError(`The collection ${body.name} was not created`, exc);
      $("new-name").focus();
      return;
    }
    closeCreate();
    await reload(body.name);
    $("search").focus();
  });
  $("delete-collection").addEventListener("click", async () => {
    const c = state.collection;
    if (!c) return;
    const sure = await confirmAction(`Delete the collection "${c.name}" with its ${c.items} items and their stored files? This cannot be undone.`, "Delete collection");
    if (!sure) return;
    try {
      await request("DELETE", path.collection(c.name));
    } catch (exc) {
      showError(`The collection ${c.name} was not deleted`, exc);
      return;
    }
    forgetMedia(c.name);
    state.collection = null;
    await reload();
  });
  $("load-demo").addEventListener("click", async () => {
    const button = $("load-demo");
    button.disabled = true;
    $("demo-status").textContent = "Indexing about 90 recordings and photos; this takes a few seconds…";
    try {
      const body = await request("POST", "/v1/demo");
      $("demo-status").textContent = `Added ${Object.keys(body.added).join(", ") || "nothing new"} in ${body.seconds.toFixed(1)} s.`;
    } catch (exc) {
      $("demo-status").textContent = "";
      showError("The demo data was not loaded", exc);
      return;
    } finally {
      button.disabled = false;
    }
    await reload("demo-words");
  });
}
