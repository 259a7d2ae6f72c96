"""Keep Python's cyclic garbage collector off the long-lived heap.

After the models load, the process holds ~100k long-lived objects (modules, numba and protobuf machinery, the
models' sessions and tables). Every full collection walks all of them: 20-25 ms on an idle server, 60-130 ms of
wall time under streaming load (bench/stream_cpu.py, 256 streams), with the interpreter lock held, so every
model instance and the event loop stand still meanwhile. Freezing them after a load (``gc.freeze``) leaves
the collector only the objects made since; refcounting still frees frozen objects that die.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect what is garbage now, then freeze the survivors. Call after models are loaded or unloaded."""
    gc.unfreeze()  # frozen objects that died in cycles since (an unloaded model's) become collectable again
    gc.collect()
    gc.freeze()
