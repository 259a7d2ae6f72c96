"""Training-only pieces (losses) that the recogniser never needs at inference."""
