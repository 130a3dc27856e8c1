// Page wiring: the API key, the collection picker, the query inputs, ingest and the item browser.

import { apiKey, mediaUrl, path, request, saveApiKey } from "./api.js";
import { wireCollections } from "./collections.js";
import { ingestFiles } from "./ingest.js";
import { hideConfidence } from "./judge.js";
import { startRecording } from "./record.js";
import { fileQuery, itemQuery, runQuery, textQuery } from "./search.js";
import { clearError, confirmAction, dropZone, el, showError, state } from "./ui.js";

const COLLECTION_STORAGE = "recall.collection";
const PAGE = 12;
let itemOffset = 0;

function $(id) {
  return document.getElementById(id);
}

// Show the parts of the page that need a collection only when one is selected.
function showWork(on) {
  for (const id of ["search", "results-section", "ingest", "browse"]) $(id).hidden = !on;
}

// List collections (and encoders) and select `wanted`, the remembered one, or the first.
// `keepBanner`: re-listing after an error (a 404) must not hide the message that explains it.
async function loadCollections(wanted, keepBanner = false) {
  if (!keepBanner) clearError();
  let collections;
  try {
    const encoders = await request("GET", "/v1/encoders");
    state.encoders = new Map(encoders.data.map((row) => [row.name, row]));
    collections = (await request("GET", "/v1/collections")).data;
  } catch (exc) {
    if (exc.status === 503) {
      // `recall serve` answers before encoders and indices are loaded (and the demo is seeded)
      $("collection-info").textContent = "The service is starting; collections appear in a moment…";
      setTimeout(() => loadCollections(wanted), 1000);
      return;
    }
    showWork(false);
    showError("Cannot list the collections", exc);
    return;
  }
  const select = $("collection");
  select.replaceChildren(...collections.map((c) => el("option", { value: c.name }, `${c.name} (${c.modality})`)));
  select.disabled = !collections.length;
  $("empty").hidden = collections.length > 0;
  $("delete-collection").disabled = !collections.length;
  if (!collections.length) {
    state.collection = null;
    showWork(false);
    $("collection-info").textContent = "No collections yet.";
    return;
  }
  const names = collections.map((c) => c.name);
  const remembered = localStorage.getItem(COLLECTION_STORAGE);
  select.value = [wanted, remembered].find((name) => names.includes(name)) || names[0];
  await selectCollection(select.value);
  showWork(Boolean(state.collection)); // shown once usable: no control acts on a collection not yet loaded
}

async function selectCollection(name) {
  localStorage.setItem(COLLECTION_STORAGE, name);
  try {
    state.collection = await request("GET", path.collection(name));
  } catch (exc) {
    showError(`Cannot open the collection ${name}`, exc);
    return;
  }
  const c = state.collection;
  $("collection-info").textContent = describe(c);
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

function describe(c) {
  const kinds = c.index_kinds.join(" + ");
  const windows = c.modality === "audio" ? `, ${c.window_s} s windows every ${c.hop_s} s` : "";
  return `${c.items} items, ${c.segments} segments · encoder ${c.encoder} (${c.bits} bits, ${kinds}${windows})` +
    (c.description ? ` · ${c.description}` : "");
}

async function refreshCollection() {
  if (!state.collection) return;
  try {
    state.collection = await request("GET", path.collection(state.collection.name));
    $("collection-info").textContent = describe(state.collection);
  } catch (exc) {
    if (exc.status === 404) showError(`The collection ${state.collection.name} is gone`, exc);
    return;
  }
  await loadItems();
}

async function loadItems() {
  const c = state.collection;
  let page;
  try {
    page = await request("GET", path.collection(c.name) + "/items", { params: { limit: String(PAGE), offset: String(itemOffset) } });
  } catch (exc) {
    showError(`Cannot list the items of ${c.name}`, exc);
    return;
  }
  if (!page.data.length && itemOffset > 0) { // the last item of a page was deleted: step back
    itemOffset = Math.max(0, itemOffset - PAGE);
    await loadItems();
    return;
  }
  $("items").replaceChildren(...page.data.map((item) => itemRow(c, item)));
  if (!page.count) $("items").append(el("li", { className: "muted" }, "Empty: add files above to search them."));
  $("items-page").textContent = page.count ? `${itemOffset + 1}–${itemOffset + page.data.length} of ${page.count}` : "";
  $("prev-items").disabled = itemOffset === 0;
  $("next-items").disabled = itemOffset + PAGE >= page.count;
}

function itemRow(collection, item) {
  const text = item.metadata.label || item.metadata.caption || item.filename || "";
  const row = el("li", { className: "item", dataset: { id: item.id } });
  if (collection.modality === "image" && item.has_media) {
    const thumb = el("img", { className: "mini", alt: "" });
    mediaUrl(collection.name, item.id).then((url) => { thumb.src = url; }, () => thumb.remove());
    row.append(thumb);
  }
  const duration = item.duration_s ? ` · ${item.duration_s.toFixed(1)} s` : "";
  row.append(
    el("span", {}, el("strong", {}, item.id), el("span", { className: "muted" }, ` ${text}${duration}`)),
    el("button", { type: "button", onclick: () => runQuery(itemQuery(item.id)) }, "Search with this"),
    el("button", { type: "button", className: "danger", ariaLabel: `Delete ${item.id}`, onclick: () => deleteItem(collection, item) }, "Delete"));
  return row;
}

async function deleteItem(collection, item) {
  const sure = await confirmAction(`Delete ${item.id} from ${collection.name}? Its stored file goes too; this cannot be undone.`, "Delete item");
  if (!sure) return;
  try {
    await request("DELETE", path.item(collection.name, item.id));
  } catch (exc) {
    showError(`${item.id} was not deleted`, exc);
    await refreshCollection();
    return;
  }
  for (const card of $("results").querySelectorAll(".result")) if (card.dataset.id === item.id) card.remove();
  await refreshCollection();
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
  wireCollections({ reload: loadCollections });
  // a 404 anywhere means the page is out of date (deleted in another tab): list again, keep the message
  document.addEventListener("recall:stale", () => loadCollections(state.collection && state.collection.name, true));
}

wire();
loadCollections();
