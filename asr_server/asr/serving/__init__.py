"""Serving glue for the Triton python models in model_repo/: offline scoring, streaming state, config parameters."""
