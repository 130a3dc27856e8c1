// Adding files: one upload per file so each gets its own progress bar and its own error.

import { uploadFile } from "./api.js";
import { el, state } from "./ui.js";

export async function ingestFiles(files, onDone) {
  const collection = state.collection;
  if (!collection) return;
  const list = document.getElementById("uploads");
  const rows = files.map((file) => {
    const bar = el("progress", { max: 1, value: 0 });
    bar.setAttribute("aria-label", `Upload of ${file.name}`);
    const status = el("span", { className: "status" }, "waiting");
    const row = el("li", { className: "upload", dataset: { file: file.name } }, el("span", { className: "name" }, file.name), bar, status);
    list.prepend(row);
    return { file, bar, status, row };
  });
  // one at a time: the service batches across requests anyway, and the bars read in order
  for (const { file, bar, status, row } of rows) {
    status.textContent = "uploading";
    try {
      const report = await uploadFile(collection.name, file, (fraction) => { bar.value = fraction; });
      bar.value = 1;
      if (report.indexed && report.indexed.length) {
        const item = report.indexed[0];
        status.textContent = `indexed as ${item.id} (${item.segments} segment${item.segments === 1 ? "" : "s"})`;
        row.classList.add("ok");
      } else if (report.errors && report.errors.length) {
        fail(row, status, report.errors[0].error.message);
      } else {
        status.textContent = "accepted; indexing in the background";
        row.classList.add("ok");
      }
    } catch (exc) {
      fail(row, status, exc.message);
    }
  }
  onDone();
}

function fail(row, status, message) {
  row.classList.add("failed");
  status.textContent = message;
  status.setAttribute("role", "alert");
}
