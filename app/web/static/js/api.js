// The /v1 API as the page uses it: every request carries the API key the user saved, and every
// failure becomes an ApiError holding the service's one error shape {error: {code, message}}.

// sessionStorage: the key lives as long as the tab, and is not left behind on a shared computer
const KEY_STORAGE = "recall.apiKey";

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE) || "";
}

export function saveApiKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
  mediaCache.clear(); // blobs fetched with the old key may be 401s
}

function headers(extra = {}) {
  const key = apiKey();
  return key ? { ...extra, "X-API-Key": key } : extra;
}

export function errorFromBody(status, text) {
  try {
    const body = JSON.parse(text);
    if (body && body.error) return new ApiError(status, body.error.code, body.error.message, body.error.details);
  } catch (_) { /* not JSON: a proxy page or a dropped connection */ }
  return new ApiError(status, "http_error", text ? `HTTP ${status}: ${text.slice(0, 200)}` : `HTTP ${status}`);
}

export async function request(method, path, { json, form, params } = {}) {
  let url = path;
  if (params) url += "?" + new URLSearchParams(params).toString();
  const init = { method, headers: headers() };
  if (json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  } else if (form !== undefined) {
    init.body = form; // the browser sets the multipart boundary
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (exc) {
    throw new ApiError(0, "unreachable", `The service did not answer (${exc.message}).`);
  }
  const text = await response.text();
  if (!response.ok) throw errorFromBody(response.status, text);
  return text ? JSON.parse(text) : null;
}

export const path = {
  collection: (name) => `/v1/collections/${encodeURIComponent(name)}`,
  item: (name, id) => `/v1/collections/${encodeURIComponent(name)}/items/${encodeURIComponent(id)}`,
};

// <audio src> and <img src> cannot send the key header, so media is fetched and shown as a blob URL.
const mediaCache = new Map();

export function mediaUrl(collection, id) {
  const cacheKey = `${collection}\u0000${id}`;
  if (!mediaCache.has(cacheKey)) {
    const promise = fetch(path.item(collection, id) + "/media", { headers: headers() }).then(async (response) => {
      if (!response.ok) throw errorFromBody(response.status, await response.text());
      return URL.createObjectURL(await response.blob());
    });
    promise.catch(() => mediaCache.delete(cacheKey)); // let a later attempt retry
    mediaCache.set(cacheKey, promise);
  }
  return mediaCache.get(cacheKey);
}

export function forgetMedia(collection) {
  for (const [cacheKey, promise] of mediaCache) {
    if (cacheKey.startsWith(`${collection}\u0000`)) {
      promise.then((url) => URL.revokeObjectURL(url), () => {});
      mediaCache.delete(cacheKey);
    }
  }
}

// Upload files in one request with XMLHttpRequest, because fetch reports no upload progress.
// Resolves {status, body}: 200 with {indexed, errors} once committed, or 202 with a job to follow.
export function uploadFiles(collection, files, onProgress, { wait = true } = {}) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", path.collection(collection) + "/items" + (wait ? "" : "?wait=false"));
    const key = apiKey();
    if (key) xhr.setRequestHeader("X-API-Key", key);
    xhr.upload.onprogress = (event) => {
      if (event.lengthComputable) onProgress(event.loaded / event.total);
    };
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) resolve({ status: xhr.status, body: JSON.parse(xhr.responseText || "{}") });
      else reject(errorFromBody(xhr.status, xhr.responseText));
    };
    xhr.onerror = () => reject(new ApiError(0, "unreachable", "The upload failed: the service did not answer."));
    const form = new FormData();
    for (const file of files) form.append("files", file, file.name);
    xhr.send(form);
  });
}

// Follow an ingest job until it ends, reporting each state; resolves the final one.
export async function followJob(jobId, onState, intervalMs = 300) {
  for (;;) {
    const job = await request("GET", `/v1/jobs/${encodeURIComponent(jobId)}`);
    onState(job);
    if (job.status !== "queued" && job.status !== "running") return job;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

// A short stable id for query bytes (qids must be tokens; crypto.subtle needs HTTPS off localhost).
export async function contentHash(blob) {
  const bytes = new Uint8Array(await blob.arrayBuffer());
  let h1 = 0xdeadbeef, h2 = 0x41c6ce57;
  for (let i = 0; i < bytes.length; i++) {
    h1 = Math.imul(h1 ^ bytes[i], 2654435761);
    h2 = Math.imul(h2 ^ bytes[i], 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return (h2 >>> 0).toString(16).padStart(8, "0") + (h1 >>> 0).toString(16).padStart(8, "0");
}
