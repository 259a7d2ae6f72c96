"""ONNX export of a U2Model with parity checks, and where exported graphs live.

Modules (B = batch, the only dynamic axis of the streaming graphs):
  graphs.py       the wrappers: the model's own methods adapted to the consumers' tensor names and layouts
  encoders.py     encoder.onnx (WeNet export_onnx_gpu.py's offline encoder) and streaming_encoder.onnx
                  (batched chunk step with explicit caches, Triton implicit state), each with its parity check
  decoder.py      decoder.onnx: attention rescoring -> best_index, ctc_weight / reverse_weight baked in
  sherpa.py       sherpa/model.onnx: sherpa-onnx OnlineRecognizer.from_wenet_ctc contract (batch 1)
  export_all.py   every graph of a model into one folder
  parity.py, onnx_io.py   ORT-vs-torch comparison; torch.onnx.export and graph I/O fixes
  onnx_layout.py  where the graphs of a model are (this project's folder or WeNet's)
Every ``export_*`` function runs ONNX Runtime on random inputs against PyTorch and raises ``ExportMismatch``
when they differ by more than ``ExportOptions.atol``.
"""
