// Judging results: relevant / partly / not, saved as qrels for the evaluation toolkit; when two
// configurations are compared, their rankings are saved as runs and the page shows the Minimal
// Test Collections confidence that they are ordered right.

import { path, request } from "./api.js";
import { el, showError } from "./ui.js";

const GRADES = [
  { grade: 2, text: "Relevant" },
  { grade: 1, text: "Partly" },
  { grade: 0, text: "Not relevant" },
];

let comparison = null; // {collection, systems, k} of the comparison on screen
let currentQid = null; // the query whose results are on screen
const pending = new Map(); // qid -> Promise of that query's saved judgments

function savedJudgments(collection, qid) {
  if (!pending.has(qid)) {
    const promise = request("GET", path.collection(collection) + "/judgments", { params: { qid } })
      .then((body) => new Map(body.data.map((row) => [row.doc, row.grade])));
    promise.catch(() => pending.delete(qid));
    pending.set(qid, promise);
  }
  return pending.get(qid);
}

export function judgeControls(collection, query, docId) {
  const group = el("div", { className: "judge", role: "group", ariaLabel: `Judge ${docId}` },
    el("span", { className: "muted" }, "Judge:"));
  const buttons = GRADES.map(({ grade, text }) => el("button", {
    type: "button", className: "grade", dataset: { grade: String(grade) },
    onclick: () => judge(collection, query, docId, grade, buttons),
  }, text));
  buttons.forEach((button) => button.setAttribute("aria-pressed", "false"));
  group.append(...buttons);
  savedJudgments(collection, query.qid).then((saved) => {
    if (saved.has(docId)) press(buttons, saved.get(docId));
  }, () => {});
  return group;
}

function press(buttons, grade) {
  for (const button of buttons) button.setAttribute("aria-pressed", String(Number(button.dataset.grade) === grade));
}

async function judge(collection, query, docId, grade, buttons) {
  try {
    await request("POST", path.collection(collection) + "/judgments", {
      json: { qid: query.qid, doc: docId, grade, query: query.description },
    });
  } catch (exc) {
    showError("The judgment was not saved", exc);
    return;
  }
  press(buttons, grade);
  pending.delete(query.qid);
  if (comparison && comparison.collection === collection) await showConfidence();
}

export async function recordComparison(collection, query, systems, responses, k) {
  const runs = {};
  systems.forEach((system, n) => {
    runs[system] = responses[n].results.map((result) => ({ id: result.id, score: result.score }));
  });
  comparison = { collection, systems, k };
  currentQid = query.qid;
  try {
    await request("POST", path.collection(collection) + "/judgments/runs", {
      json: { qid: query.qid, query: query.description, runs },
    });
  } catch (exc) {
    showError("The compared rankings were not saved", exc);
    return;
  }
  await showConfidence();
}

export function hideConfidence() {
  comparison = null;
  document.getElementById("confidence").hidden = true;
}

async function showConfidence() {
  const panel = document.getElementById("confidence");
  const { collection, systems, k } = comparison;
  let body;
  try {
    body = await request("GET", path.collection(collection) + "/judgments/confidence", {
      params: { k: String(k), systems: systems.join(",") },
    });
  } catch (exc) {
    panel.textContent = `No confidence estimate: ${exc.message}`;
    panel.hidden = false;
    return;
  }
  panel.hidden = false;
  if (body.confidence === null) {
    panel.textContent = body.reason;
    return;
  }
  const [a, b] = systems;
  const means = body.system_means;
  const tied = Math.abs(means[a] - means[b]) < 1e-9;
  const claim = tied ? ` in the order of ${a} and ${b}: they look tied at AG@${k} so far` : ` that ${means[a] > means[b] ? a : b} is better at AG@${k}`;
  panel.replaceChildren(
    el("p", {},
      el("strong", { className: "confidence-value" }, `Confidence ${(100 * body.confidence).toFixed(0)}%`),
      `${claim} (estimated mean gain ${a} ${means[a].toFixed(3)}, ${b} ${means[b].toFixed(3)}).`),
    el("p", { className: "muted" },
      `${body.judged_in_pool} of ${body.pool_pairs} pooled results judged over ${body.queries} queries; ` +
      nextAdvice(body.next)));
}

function nextAdvice(next) {
  if (!next.length) return "every result that separates the two is judged.";
  const named = next.slice(0, 3).map((pair) => {
    const query = decodeURIComponent(pair.qid.replace(/^[a-z]+:/, ""));
    return pair.qid === currentQid ? pair.doc : `${pair.doc} (for ${query})`;
  });
  return `judging ${named.join(", ")} next would help most.`;
}
