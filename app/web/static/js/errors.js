// Every error the API can return, said in words with what to do about it. The service's own
// message says what was wrong (which file, which limit); the advice says what the person can do.
// tests/web/test_errors.py checks that every code in app/errors.py has an entry here.

export const ADVICE = {
  bad_request: "The page sent something the service could not read. Reload the page and try again.",
  unauthorized: "Enter the service's API key in the API key field at the top and press Save key.",
  forbidden: "This API key may not do that: searching and listing need a key with the read scope, adding and deleting files the write scope, creating and deleting collections the admin scope. Ask whoever runs the service for a key with that scope (recall keys create --scopes ...).",
  not_found: "It may have been deleted, perhaps in another tab. The lists on this page have been refreshed; pick again.",
  conflict: "That name is taken. Choose another name, or pick the existing collection from the list.",
  payload_too_large: "Use a shorter recording or a smaller file (split long recordings into parts), or ask whoever runs the service to raise its RECALL_LIMITS__ settings.",
  unsupported_media: "Use a format the service decodes (audio: WAV, FLAC, Ogg, MP3, M4A, WebM; images: JPEG, PNG, WebP, GIF) that matches the collection: audio files for an audio collection, images for an image collection.",
  invalid_input: "Check that the file is complete and plays or opens on your computer (export it again if not), or correct the value the message names.",
  overloaded: "The service is busy with other work. Wait a few seconds and try again.",
  rate_limited: "Too many requests with this API key in a short time. Wait a few seconds and try again.",
  unavailable: "The service is starting up or shutting down. Wait a moment and try again; the page retries on its own while it starts.",
  storage_read_only: "The service's data folder has become read-only, so nothing can be added or deleted now; searching still works. Whoever runs the service must make it writable again (no restart needed), then try again.",
  insufficient_storage: "The service's disk is full, so nothing was added. Whoever runs the service must free space or grow the disk (no restart needed), then try again.",
  backend_error: "Something failed inside the service, not in what you sent. Try again; if it happens again, whoever runs the service can find the cause in its log.",
  internal_error: "Something failed inside the service, not in what you sent. Try again; if it happens again, whoever runs the service can find the cause in its log.",
  method_not_allowed: "The page and the service do not match (an old copy of the page?). Reload the page.",
  unreachable: "Check that the service is running (make serve) and that this computer can reach it, then try again.",
  http_error: "Something between the page and the service (a proxy?) answered instead of the service. Try again, or reload the page.",
};

// The advice for an error: by the service's code, else by the HTTP status.
export function advice(exc) {
  if (exc && ADVICE[exc.code]) return ADVICE[exc.code];
  const byStatus = { 400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 409: "conflict", 413: "payload_too_large", 415: "unsupported_media", 422: "invalid_input", 429: "overloaded", 503: "unavailable", 507: "insufficient_storage" };
  const code = exc && (byStatus[exc.status] || (exc.status >= 500 ? "internal_error" : "http_error"));
  return ADVICE[code] || ADVICE.http_error;
}

// "What went wrong. What to do." in one line; `what` names the action that failed.
export function explain(what, exc) {
  const message = (exc && exc.message ? String(exc.message) : "unknown error").replace(/\s+$/, "");
  const sentence = /[.!?]$/.test(message) ? message : message + ".";
  return `${what}: ${sentence} ${advice(exc)}`;
}
