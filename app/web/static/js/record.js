// Recording a query from the microphone with MediaRecorder (WebM/Opus in Chromium, Ogg in
// Firefox); the service decodes either through PyAV.

const MAX_SECONDS = 30; // well under the service's query limit (60 s by default)

export async function startRecording(onRecorded) {
  const recordButton = document.getElementById("record");
  const stopButton = document.getElementById("stop");
  const status = document.getElementById("record-status");
  if (!navigator.mediaDevices || typeof MediaRecorder === "undefined") {
    // getUserMedia exists only on https:// or localhost pages
    status.textContent = "This browser cannot record here (recording needs https or localhost). Drop a file instead.";
    return;
  }
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (exc) {
    status.textContent = `No microphone: ${exc.message}. Drop a file instead.`;
    return;
  }
  const recorder = new MediaRecorder(stream);
  const chunks = [];
  const started = performance.now();
  recorder.ondataavailable = (event) => { if (event.data.size) chunks.push(event.data); };
  const ticker = setInterval(() => {
    const seconds = (performance.now() - started) / 1000;
    status.textContent = `Recording… ${seconds.toFixed(1)} s`;
    if (seconds >= MAX_SECONDS) stop();
  }, 100);
  function stop() {
    if (recorder.state !== "inactive") recorder.stop();
  }
  recorder.onstop = () => {
    clearInterval(ticker);
    stream.getTracks().forEach((track) => track.stop());
    recordButton.disabled = false;
    stopButton.disabled = true;
    const type = recorder.mimeType || "audio/webm";
    const extension = type.includes("ogg") ? "ogg" : type.includes("mp4") ? "m4a" : "webm";
    const blob = new Blob(chunks, { type });
    status.textContent = `Recorded ${((performance.now() - started) / 1000).toFixed(1)} s`;
    onRecorded(new File([blob], `recording.${extension}`, { type }));
  };
  stopButton.onclick = stop;
  recordButton.disabled = true;
  stopButton.disabled = false;
  recorder.start(250);
}
