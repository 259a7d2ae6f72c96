"""ONNX export of a U2Model with parity checks, and where exported graphs live."""
