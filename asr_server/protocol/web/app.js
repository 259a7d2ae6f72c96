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
    event.target.close();  // this socket's stream is over (a newer one may be running)
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
  try {
    await new Promise((resolve, reject) => {
      socket.onopen = resolve;
      socket.onerror = () => reject(new Error("the connection failed"));
      socket.onclose = () => reject(new Error("the server closed the connection"));
    });
  } catch (e) {
    status(e.message);
    stream.getTracks().forEach((t) => t.stop());
    return;
  }
  socket.onerror = () => status("the connection failed");
  socket.onclose = null;
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

function clock(seconds, decimal) {
  const ms = Math.round(seconds * 1000);
  const pad = (n, w) => String(n).padStart(w, "0");
  return `${pad(Math.floor(ms / 3600000), 2)}:${pad(Math.floor(ms / 60000) % 60, 2)}:` +
         `${pad(Math.floor(ms / 1000) % 60, 2)}${decimal}${pad(ms % 1000, 3)}`;
}

function subtitles(segments, vtt) {
  const cues = segments.map((s, i) => `${vtt ? "" : `${i + 1}\n`}${clock(s.start, vtt ? "." : ",")} --> ` +
                                      `${clock(s.end, vtt ? "." : ",")}\n${s.text}\n`);
  return (vtt ? "WEBVTT\n\n" : "") + cues.join("\n");
}

async function transcribeFile(file) {
  $("filetext").textContent = `transcribing ${file.name} ...`;
  const form = new FormData();  // one request: the subtitles are made here from its segments
  form.append("file", file, file.name);
  form.append("model", "whisper-1");
  form.append("response_format", "verbose_json");
  form.append("timestamp_granularities[]", "segment");
  try {
    const reply = await fetch("/v1/audio/transcriptions", { method: "POST", body: form });
    if (!reply.ok) throw new Error((await reply.json()).error.message);
    const result = await reply.json();
    $("filetext").textContent = result.text;
    $("srt").href = URL.createObjectURL(new Blob([subtitles(result.segments, false)], { type: "text/plain" }));
    $("vtt").href = URL.createObjectURL(new Blob([subtitles(result.segments, true)], { type: "text/vtt" }));
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
