// The page at /: microphone -> AudioWorklet (16 kHz int16) -> WebSocket in WeNet's dialect -> partials and
// finals with word times; a dropped file -> POST /v1/audio/transcriptions (verbose_json, srt, vtt).
"use strict";
const $ = (id) => document.getElementById(id);
let socket = null, context = null, source = null, node = null, stream = null;

function status(text) { $("status").textContent = text || ""; }

function showFinal(piece) {
  const p = document.createElement("p");
  const words = piece.word_pieces || [];
  if (words.length) {
    const time = document.createElement("span");
    time.className = "time";
    time.textContent = `[${(words[0].start / 1000).toFixed(2)} s]`;
    p.appendChild(time);
  }
  for (const w of words) {
    const span = document.createElement("span");
    span.className = "word";
    span.title = `${(w.start / 1000).toFixed(2)} - ${(w.end / 1000).toFixed(2)} s`;
    span.textContent = w.word + " ";
    p.appendChild(span);
  }
  if (!words.length) p.appendChild(document.createTextNode(piece.sentence));
  p.dataset.text = piece.sentence;
  $("finals").appendChild(p);
}

function onMessage(event) {
  const msg = JSON.parse(event.data);
  if (msg.status !== "ok") { status(msg.message || "error"); return; }
  if (msg.type === "partial_result") {
    $("partial").textContent = JSON.parse(msg.nbest)[0].sentence;
  } else if (msg.type === "final_result") {
    const best = JSON.parse(msg.nbest)[0];
    $("partial").textContent = "";
    if (best && best.sentence) showFinal(best);
  } else if (msg.type === "speech_end") {
    document.body.dataset.done = "1";
    if (socket) socket.close();
  }
}

async function start() {
  status("");
  document.body.dataset.done = "";
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: false } });
  } catch (e) {
    status(`no microphone: ${e.message} (the browser gives it only to https:// pages and localhost)`);
    return;
  }
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  socket = new WebSocket(`${scheme}://${location.host}/?model=${encodeURIComponent($("model").value)}`);
  socket.binaryType = "arraybuffer";
  socket.onmessage = onMessage;
  socket.onerror = () => status("the connection failed");
  await new Promise((resolve) => { socket.onopen = resolve; });
  socket.send(JSON.stringify({ signal: "start", nbest: 1, continuous_decoding: true }));
  context = new AudioContext();
  await context.audioWorklet.addModule("pcm-worklet.js");
  source = context.createMediaStreamSource(stream);
  node = new AudioWorkletNode(context, "pcm-sender");
  node.port.onmessage = (e) => { if (socket && socket.readyState === 1) socket.send(e.data); };
  source.connect(node);
  $("start").disabled = true;
  $("stop").disabled = false;
}

function stop() {
  if (node) { node.port.onmessage = null; source.disconnect(); node.disconnect(); }
  if (stream) stream.getTracks().forEach((t) => t.stop());
  if (context) context.close();
  if (socket && socket.readyState === 1) socket.send(JSON.stringify({ signal: "end" }));
  node = source = stream = context = null;
  $("start").disabled = false;
  $("stop").disabled = true;
}

async function transcribeFile(file) {
  $("filetext").textContent = `transcribing ${file.name} ...`;
  const ask = async (format) => {
    const form = new FormData();
    form.append("file", file, file.name);
    form.append("model", "whisper-1");
    form.append("response_format", format);
    if (format === "verbose_json") form.append("timestamp_granularities[]", "word");
    const reply = await fetch("/v1/audio/transcriptions", { method: "POST", body: form });
    if (!reply.ok) throw new Error((await reply.json()).error.message);
    return format === "verbose_json" ? reply.json() : reply.text();
  };
  try {
    const result = await ask("verbose_json");
    $("filetext").textContent = result.text;
    for (const [format, id] of [["srt", "srt"], ["vtt", "vtt"]]) {
      const text = await ask(format);
      $(id).href = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
    }
    $("subs").hidden = false;
  } catch (e) {
    $("filetext").textContent = `failed: ${e.message}`;
  }
}

$("start").onclick = start;
$("stop").onclick = stop;
$("file").onchange = (e) => e.target.files[0] && transcribeFile(e.target.files[0]);
const drop = $("drop");
drop.ondragover = (e) => { e.preventDefault(); drop.classList.add("over"); };
drop.ondragleave = () => drop.classList.remove("over");
drop.ondrop = (e) => { e.preventDefault(); drop.classList.remove("over"); if (e.dataTransfer.files[0]) transcribeFile(e.dataTransfer.files[0]); };
