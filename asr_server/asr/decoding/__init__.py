"""From network outputs to text: CTC searches, hotwords, attention rescoring, endpointing, alignment and DETAILS."""
