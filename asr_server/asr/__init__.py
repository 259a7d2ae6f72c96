"""The recogniser's pieces, usable without the server (nothing here imports the server's layers).

- ``features``: audio -> Kaldi fbank frames (streaming buffer, batched numpy / torch), CMVN statistics.
- ``nn``: the U2++ network (``nn.model.U2Model``) and WeNet model directories (``nn.checkpoint``).
- ``decoding``: CTC searches, hotwords, attention rescoring, endpointing, alignment, the DETAILS output.
- ``serving``: what the Triton python models in ``model_repo/`` call: offline scoring, streaming state,
  reading config parameters, BLS helpers.
- ``export``: ONNX export with parity checks, and where exported graphs live.
- ``training``: training-only pieces (the restricted CTC loss).
- ``units``: the symbol table and tokenizer every layer above shares.
"""
