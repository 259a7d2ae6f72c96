// AudioWorklet: the microphone's float samples (the context's rate, often 48 kHz) -> 16 kHz int16 PCM blocks
// posted to the page about every 100 ms. Resampling is linear interpolation after a moving-average low-pass
// wide enough for the rate ratio: plain, but speech below 8 kHz comes through.
class PcmSender extends AudioWorkletProcessor {
  constructor() {
    super();
    this.ratio = sampleRate / 16000;
    this.pos = 0;          // read position in the input stream, in input samples
    this.history = [];     // the last input samples (for the low-pass and interpolation across blocks)
    this.out = [];
  }
  process(inputs) {
    const input = inputs[0] && inputs[0][0];
    if (!input) return true;
    const width = Math.max(1, Math.round(this.ratio));
    const buf = this.history.concat(Array.from(input));
    const base = this.history.length;
    // low-pass: moving average over `width` samples
    const smooth = new Float32Array(buf.length);
    let acc = 0;
    for (let i = 0; i < buf.length; i++) {
      acc += buf[i];
      if (i >= width) acc -= buf[i - width];
      smooth[i] = acc / Math.min(i + 1, width);
    }
    // this.pos counts from the start of `buf`'s new part; interpolate inside the smoothed buffer
    while (this.pos + 1 < input.length) {
      const x = base + this.pos;
      const i = Math.floor(x), f = x - i;
      const v = smooth[i] * (1 - f) + smooth[Math.min(i + 1, smooth.length - 1)] * f;
      this.out.push(Math.max(-1, Math.min(1, v)));
      this.pos += this.ratio;
    }
    this.pos -= input.length;  // now relative to the next block's start (in [-1, ratio - 1))
    this.history = Array.from(input.slice(Math.max(0, input.length - width)));
    if (this.out.length >= 1600) {
      const pcm = new Int16Array(this.out.length);
      for (let i = 0; i < this.out.length; i++) pcm[i] = Math.round(this.out[i] * 32767);
      this.port.postMessage(pcm.buffer, [pcm.buffer]);
      this.out = [];
    }
    return true;
  }
}
registerProcessor("pcm-sender", PcmSender);
