// Running a query (file, stored item or text) and showing ranked results.
// A query is {qid, description, file?, json?}; qid names it in the judgments files.

import { contentHash, mediaUrl, path, request } from "./api.js";
import { judgeControls, recordComparison } from "./judge.js";
import { clearError, el, showError, state } from "./ui.js";

export async function fileQuery(file) {
  return { qid: `file:${await contentHash(file)}`, description: `file ${file.name}`, file };
}

export function itemQuery(id) {
  return { qid: `item:${encodeURIComponent(id)}`, description: `item ${id}`, json: { item_id: id } };
}

export function textQuery(text) {
  const normal = text.trim().replace(/\s+/g, " ");
  return { qid: `text:${encodeURIComponent(normal.toLowerCase()).slice(0, 190)}`, description: `text "${normal}"`, json: { text: normal } };
}

function options() {
  const k = Math.max(1, Math.min(100, parseInt(document.getElementById("k").value, 10) || 10));
  const compare = document.getElementById("compare").checked;
  const modes = compare
    ? [document.getElementById("system-a").value, document.getElementById("system-b").value]
    : [document.getElementById("mode").value];
  // long recordings can hold a sound many times: ask for more than the service's default of 3
  const segments = Math.max(1, Math.min(20, parseInt(document.getElementById("segments-per-item").value, 10) || 5));
  // how an item combines a multi-window query's windows (audio); the service's default is "mean"
  const itemDistance = document.getElementById("item-distance").value;
  return { k, modes, segments, itemDistance };
}

function searchOnce(collection, query, { k, segments, itemDistance }, mode) {
  const url = path.collection(collection) + "/search";
  if (query.file) {
    const form = new FormData();
    form.append("file", query.file, query.file.name || "query");
    form.append("k", String(k));
    form.append("mode", mode);
    form.append("segments_per_item", String(segments));
    form.append("item_distance", itemDistance);
    return request("POST", url, { form });
  }
  return request("POST", url, { json: { ...query.json, k, mode, segments_per_item: segments, item_distance: itemDistance } });
}

export async function runQuery(query) {
  const collection = state.collection;
  if (!collection) return;
  const settings = options();
  const { k, modes } = settings;
  if (modes.length === 2 && modes[0] === modes[1]) {
    showError("Pick two different configurations to compare.");
    return;
  }
  state.query = query;
  clearError();
  const summary = document.getElementById("query-summary");
  summary.textContent = `Searching ${collection.name} with ${query.description}…`;
  document.getElementById("results").replaceChildren();
  let responses;
  try {
    responses = await Promise.all(modes.map((mode) => searchOnce(collection.name, query, settings, mode)));
  } catch (exc) {
    summary.textContent = `The search failed: ${exc.message}`;
    showError("The search failed", exc);
    return;
  }
  if (state.query !== query) return; // a newer search started meanwhile
  const first = responses[0];
  const timing = Object.entries(first.timings).map(([name, ms]) => `${name.replace(/_ms$/, "")} ${ms.toFixed(1)} ms`).join(", ");
  summary.textContent = `${first.results.length} results for ${query.description} (${modes.join(" vs ")}; ${timing})`;
  renderResults(collection, query, modes, responses);
  if (modes.length === 2) await recordComparison(collection.name, query, modes, responses, k);
}

function pooled(modes, responses) {
  // one card per item: its rank under every configuration, ordered by the best of those ranks
  const byId = new Map();
  responses.forEach((response, n) => {
    for (const result of response.results) {
      if (!byId.has(result.id)) byId.set(result.id, { result, ranks: {}, source: modes[n] });
      byId.get(result.id).ranks[modes[n]] = result.rank;
    }
  });
  return [...byId.values()].sort((a, b) => Math.min(...Object.values(a.ranks)) - Math.min(...Object.values(b.ranks)) || a.result.id.localeCompare(b.result.id));
}

function renderResults(collection, query, modes, responses) {
  const list = document.getElementById("results");
  const rows = modes.length === 1 ? responses[0].results.map((result) => ({ result, ranks: null })) : pooled(modes, responses);
  if (!rows.length) {
    list.replaceChildren(el("li", { className: "muted" }, "Nothing matched."));
    return;
  }
  list.replaceChildren(...rows.map(({ result, ranks, source }) => resultCard(collection, query, result, ranks, modes, source)));
}

function label(metadata) {
  return metadata.label || metadata.caption || metadata.title || "";
}

function fmt(value) {
  return Number.isInteger(value) ? String(value) : value.toFixed(3);
}

function resultCard(collection, query, result, ranks, modes, source) {
  const rankText = ranks ? modes.map((m) => `${m} ${ranks[m] ? "#" + ranks[m] : "—"}`).join(" · ") : `#${result.rank}`;
  const scores = [`distance ${fmt(result.distance)}`, `score ${fmt(result.score)}`];
  if (result.stage1_score !== undefined) scores.push(`stage 1 ${fmt(result.stage1_score)}`);
  if (result.rerank_score !== undefined) scores.push(`re-rank ${fmt(result.rerank_score)}`);
  const card = el("li", { className: "result", dataset: { id: result.id } },
    el("div", { className: "result-head" },
      el("span", { className: "rank" }, rankText),
      el("strong", { className: "result-id" }, result.id),
      el("span", { className: "muted" }, label(result.metadata))),
    // binary distances are Hamming bits, float ones cosine: say which configuration they are from
    el("p", { className: "scores" }, (source ? `${source}: ` : "") + scores.join(" · ")));
  if (collection.modality === "audio") card.append(...audioParts(collection, result));
  else card.append(imagePart(collection, result));
  card.append(judgeControls(collection.name, query, result.id));
  return card;
}

function audioParts(collection, result) {
  const player = el("audio", { controls: true, preload: "auto", className: "player" });
  player.setAttribute("aria-label", `Play ${result.id}`);
  const best = result.segments[0];
  const timeline = el("div", { className: "timeline", hidden: true, role: "group", ariaLabel: `Where ${result.id} matches` });
  mediaUrl(collection.name, result.id).then((url) => {
    // start at the matching segment: set the time once the browser knows the duration
    player.addEventListener("loadedmetadata", () => {
      if (best) player.currentTime = best.start;
      drawTimeline(timeline, player, result);
    }, { once: true });
    player.src = url;
  }, (exc) => player.replaceWith(el("p", { className: "error" }, `Cannot play ${result.id}: ${exc.message}`)));
  const segments = el("ul", { className: "segments", ariaLabel: "Matching segments" },
    ...result.segments.map((segment) => el("li", {},
      el("button", {
        type: "button", className: "segment",
        onclick: () => playFrom(player, segment.start),
      }, `▶ ${segment.start.toFixed(1)}–${segment.end.toFixed(1)} s`),
      el("span", { className: "muted" }, ` distance ${fmt(segment.distance)}`))));
  const again = el("button", { type: "button", onclick: () => runQuery(itemQuery(result.id)) }, "Search with this clip");
  return [player, timeline, segments, again];
}

function playFrom(player, seconds) {
  player.currentTime = seconds;
  player.play().catch(() => {});
}

// A long recording gets a timeline: every occurrence marked where it is, a click plays from it,
// and a playhead follows the player. Short clips (one window or two) do not need one.
function drawTimeline(timeline, player, result) {
  const duration = player.duration;
  if (!Number.isFinite(duration) || !result.segments.length) return;
  const longest = Math.max(...result.segments.map((s) => s.end - s.start));
  if (duration < 3 * longest) return;
  const head = el("div", { className: "playhead" });
  // weaker matches are paler: the best is solid, the worst listed one faint
  const distances = result.segments.map((s) => s.distance);
  const [low, high] = [Math.min(...distances), Math.max(...distances)];
  const marks = result.segments.map((segment, n) => {
    const mark = el("button", {
      type: "button", className: n === 0 ? "mark best" : "mark",
      title: `${segment.start.toFixed(1)}–${segment.end.toFixed(1)} s, distance ${fmt(segment.distance)}`,
      ariaLabel: `Play occurrence ${n + 1} at ${segment.start.toFixed(1)} s`,
      onclick: () => playFrom(player, segment.start),
    });
    mark.style.left = `${(100 * segment.start) / duration}%`;
    mark.style.width = `${Math.max(1, (100 * (segment.end - segment.start)) / duration)}%`;
    mark.style.opacity = String(high > low ? 1 - 0.65 * ((segment.distance - low) / (high - low)) : 1);
    return mark;
  });
  const track = el("div", { className: "track" }, ...marks, head);
  const moveHead = () => { head.style.left = `${(100 * player.currentTime) / duration}%`; };
  player.addEventListener("timeupdate", moveHead);
  moveHead();
  timeline.replaceChildren(track, el("div", { className: "ticks muted" }, el("span", {}, "0 s"), el("span", {}, `${duration.toFixed(1)} s`)));
  timeline.hidden = false;
}

function imagePart(collection, result) {
  const image = el("img", { className: "thumb", alt: label(result.metadata) || result.id });
  mediaUrl(collection.name, result.id).then((url) => { image.src = url; }, () => { image.alt = `${result.id} (no stored image)`; });
  return el("button", {
    type: "button", className: "thumb-button", title: "Search with this image",
    ariaLabel: `Search with image ${result.id}`, onclick: () => runQuery(itemQuery(result.id)),
  }, image);
}
