// Page wiring: the API key, the collection picker, the query inputs, ingest and the item browser.

import { apiKey, mediaUrl, path, request, saveApiKey } from "./api.js";
import { ingestFiles } from "./ingest.js";
import { hideConfidence } from "./judge.js";
import { startRecording } from "./record.js";
import { fileQuery, itemQuery, runQuery, textQuery } from "./search.js";
import { clearError, dropZone, el, showError, state } from "./ui.js";

const COLLECTION_STORAGE = "recall.collection";
const PAGE = 12;
let itemOffset = 0;

function $(id) {
  return document.getElementById(id);
}

async function loadCollections() {
  clearError();
  let collections;
  try {
    const encoders = await request("GET", "/v1/encoders");
    state.encoders = new Map(encoders.data.map((row) => [row.name, row]));
    collections = (await request("GET", "/v1/collections")).data;
  } catch (exc) {
    if (exc.status === 503) {
      // `recall serve` answers before encoders and indices are loaded (and the demo is seeded)
      $("collection-info").textContent = "The service is starting; collections appear in a moment…";
      setTimeout(loadCollections, 1000);
      return;
    }
    showError(`Cannot list collections: ${exc.message}`, exc.status);
    return;
  }
  const select = $("collection");
  select.replaceChildren(...collections.map((c) => el("option", { value: c.name }, `${c.name} (${c.modality})`)));
  if (!collections.length) {
    $("collection-info").textContent = "No collections yet: create one with POST /v1/collections, or start the service with RECALL_DEMO=1.";
    return;
  }
  const remembered = localStorage.getItem(COLLECTION_STORAGE);
  select.value = collections.some((c) => c.name === remembered) ? remembered : collections[0].name;
  await selectCollection(select.value);
}

async function selectCollection(name) {
  localStorage.setItem(COLLECTION_STORAGE, name);
  try {
    state.collection = await request("GET", path.collection(name));
  } catch (exc) {
    showError(exc.message, exc.status);
    return;
  }
  const c = state.collection;
  const kinds = c.index_kinds.join(" + ");
  const windows = c.modality === "audio" ? `, ${c.window_s} s windows every ${c.hop_s} s` : "";
  $("collection-info").textContent =
    `${c.items} items, ${c.segments} segments · encoder ${c.encoder} (${c.bits} bits, ${kinds}${windows})` +
    (c.description ? ` · ${c.description}` : "");
  $("audio-query").hidden = c.modality !== "audio";
  $("image-query").hidden = c.modality !== "image";
  const encoder = state.encoders.get(c.encoder) || {};
  const textOk = Boolean(encoder.supports_text);
  $("text-query").disabled = !textOk;
  $("text-form").querySelector("button").disabled = !textOk;
  $("text-note").hidden = textOk;
  $("text-note").textContent = textOk ? "" : `The encoder ${c.encoder} searches by example only: drop an image, or click a result or an item to search with it.`;
  $("query-file").accept = c.modality === "audio" ? "audio/*,video/*" : "image/*";
  $("ingest-files").accept = $("query-file").accept;
  hideConfidence();
  $("results").replaceChildren();
  $("query-summary").textContent = "No search yet.";
  itemOffset = 0;
  await loadItems();
}

async function refreshCollection() {
  if (!state.collection) return;
  try {
    state.collection = await request("GET", path.collection(state.collection.name));
    const info = $("collection-info").textContent.replace(/^\d+ items, \d+ segments/, `${state.collection.items} items, ${state.collection.segments} segments`);
    $("collection-info").textContent = info;
  } catch (_) { /* the next action reports it */ }
  await loadItems();
}

async function loadItems() {
  const c = state.collection;
  let page;
  try {
    page = await request("GET", path.collection(c.name) + "/items", { params: { limit: String(PAGE), offset: String(itemOffset) } });
  } catch (exc) {
    showError(exc.message, exc.status);
    return;
  }
  $("items").replaceChildren(...page.data.map((item) => itemRow(c, item)));
  $("items-page").textContent = page.count ? `${itemOffset + 1}–${itemOffset + page.data.length} of ${page.count}` : "empty";
  $("prev-items").disabled = itemOffset === 0;
  $("next-items").disabled = itemOffset + PAGE >= page.count;
}

function itemRow(collection, item) {
  const text = item.metadata.label || item.metadata.caption || item.filename || "";
  const row = el("li", { className: "item" });
  if (collection.modality === "image" && item.has_media) {
    const thumb = el("img", { className: "mini", alt: "" });
    mediaUrl(collection.name, item.id).then((url) => { thumb.src = url; }, () => thumb.remove());
    row.append(thumb);
  }
  const duration = item.duration_s ? ` · ${item.duration_s.toFixed(1)} s` : "";
  row.append(
    el("span", {}, el("strong", {}, item.id), el("span", { className: "muted" }, ` ${text}${duration}`)),
    el("button", { type: "button", onclick: () => runQuery(itemQuery(item.id)) }, "Search with this"));
  return row;
}

function wire() {
  $("api-key").value = apiKey();
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    saveApiKey($("api-key").value.trim());
    loadCollections();
  });
  $("collection").addEventListener("change", (event) => selectCollection(event.target.value));
  $("text-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("text-query").value.trim();
    if (text) runQuery(textQuery(text));
  });
  dropZone($("query-drop"), async (files) => runQuery(await fileQuery(files[0])));
  dropZone($("ingest-drop"), (files) => ingestFiles(files, refreshCollection));
  $("record").addEventListener("click", () => startRecording(async (file) => runQuery(await fileQuery(file))));
  $("prev-items").addEventListener("click", () => { itemOffset = Math.max(0, itemOffset - PAGE); loadItems(); });
  $("next-items").addEventListener("click", () => { itemOffset += PAGE; loadItems(); });
  $("compare").addEventListener("change", (event) => { if (!event.target.checked) hideConfidence(); });
}

wire();
loadCollections();
