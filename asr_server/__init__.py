"""A Triton-compatible inference server and WeNet-style streaming ASR stack."""

__version__ = "0.1.0"
