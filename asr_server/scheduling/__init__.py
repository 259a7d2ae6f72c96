"""Scheduling: when, and with which other requests, a request runs on which model instance.

`factory.make_scheduler` makes every model version's `base.Scheduler` from its `ModelConfig` (the
repository's config type, see `asr_server/repository/__init__.py`): `base.DirectScheduler`,
`dynamic_batcher.DynamicBatcher`, `sequence_batcher.SequenceBatcher`, `ensemble.EnsembleScheduler`.
`instances.InstancePool` runs a formed batch on an idle instance's backend; `pending` carries responses back.
Backend-agnostic: schedulers see backends only through `asr_server/backends/base.py`.
"""
