// Adding files. One file is uploaded and indexed in one request; several go up together as an
// ingest job (?wait=false): one bar for the upload, then one for the job's progress, polled from
// /v1/jobs/{id}, and a row per file that ends as "indexed" or as that file's own error.

import { followJob, uploadFiles } from "./api.js";
import { advice, explain } from "./errors.js";
import { el, state } from "./ui.js";

export async function ingestFiles(files, onDone) {
  const collection = state.collection;
  if (!collection || !files.length) return;
  const list = document.getElementById("uploads");
  const job = jobRow(files.length === 1 ? files[0].name : `${files.length} files`);
  const rows = new Map(files.map((file) => [file.name, fileRow(file.name)]));
  list.prepend(job.row, ...[...rows.values()].map((entry) => entry.row));
  let answer;
  try {
    answer = await uploadFiles(collection.name, files, (fraction) => { job.bar.value = fraction / 2; }, { wait: files.length === 1 });
  } catch (exc) {
    // nothing was stored: the service answers with the first file's error and lists each in details
    const perFile = Array.isArray(exc.details) ? exc.details : [];
    for (const failure of perFile) failFile(rows.get(failure.file), failure);
    if (!perFile.length) for (const row of rows.values()) fail(row, explain(`${row.name} was not added`, exc));
    finish(job, `Nothing was added: ${exc.message}`, true);
    onDone();
    return;
  }
  let report = answer.body;
  if (answer.status === 202) {
    job.status.textContent = `uploaded; indexing 0 of ${report.total}`;
    try {
      report = await followJob(report.id, (current) => {
        job.bar.value = 0.5 + 0.5 * (current.total ? current.done / current.total : 0);
        job.status.textContent = `indexing ${current.done} of ${current.total}`;
        for (const failure of current.errors || []) failFile(rows.get(failure.file), failure);
      });
    } catch (exc) {
      finish(job, explain("Could not follow the ingest job", exc), true);
      onDone();
      return;
    }
    if (report.status === "failed") {
      finish(job, `The job failed: ${report.error || "see the service log"}. ${advice({ code: "backend_error" })}`, true);
      onDone();
      return;
    }
  }
  const failures = report.errors || [];
  for (const failure of failures) failFile(rows.get(failure.file), failure);
  const indexed = Array.isArray(report.indexed) ? report.indexed : null;
  for (const [name, row] of rows) {
    if (row.failed) continue;
    const item = indexed && indexed.find((entry) => entry.filename === name || entry.id === name);
    row.status.textContent = item ? `indexed as ${item.id} (${item.segments} segment${item.segments === 1 ? "" : "s"})` : "indexed";
    row.row.classList.add("ok");
  }
  const count = indexed ? indexed.length : report.indexed;
  finish(job, `${count} of ${files.length} indexed` + (failures.length ? `, ${failures.length} failed (see below)` : ""), false);
  onDone();
}

function jobRow(name) {
  const bar = el("progress", { max: 1, value: 0 });
  bar.setAttribute("aria-label", `Progress of ${name}`);
  const status = el("span", { className: "status" }, "uploading");
  status.setAttribute("aria-live", "polite");
  const row = el("li", { className: "upload job" }, el("strong", { className: "name" }, name), bar, status);
  return { row, bar, status };
}

function fileRow(name) {
  const status = el("span", { className: "status" }, "waiting");
  const row = el("li", { className: "upload file", dataset: { file: name } }, el("span", { className: "name" }, name), el("span"), status);
  return { name, row, status, failed: false };
}

function finish(job, text, failed) {
  job.bar.value = 1;
  job.status.textContent = text;
  job.row.classList.add(failed ? "failed" : "ok");
}

function failFile(row, failure) {
  if (!row || row.failed) return;
  const exc = { status: failure.status, code: failure.error.code, message: failure.error.message };
  fail(row, explain(`${failure.file} was not added`, exc));
}

function fail(row, text) {
  row.failed = true;
  row.row.classList.add("failed");
  row.status.textContent = text;
  row.status.setAttribute("role", "alert");
}
