"""Data v2 for the bundled recogniser: open English text, many synthetic voices, a resumable
corpus generator. Training-side code only: nothing under asr_server/ imports it."""
