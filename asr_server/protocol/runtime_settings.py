"""Log and trace settings as Triton reports them (LogSettings / TraceSetting RPCs and HTTP routes).

Log settings drive Python logging; trace settings are stored and reported (this server records no traces).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

_LOG_DEFAULTS: dict[str, Any] = {
    "log_file": "", "log_info": True, "log_warning": True, "log_error": True, "log_verbose_level": 0,
    "log_format": "default",
}
_TRACE_DEFAULTS: dict[str, list[str]] = {
    "trace_file": [""], "trace_level": ["OFF"], "trace_rate": ["1000"], "trace_count": ["-1"],
    "log_frequency": ["0"], "trace_mode": ["triton"],
}


class RuntimeSettings:
    def __init__(self, log_verbose: int = 0) -> None:
        self._lock = threading.Lock()
        self.log = dict(_LOG_DEFAULTS, log_verbose_level=log_verbose)
        self.trace_global = {k: list(v) for k, v in _TRACE_DEFAULTS.items()}
        self.trace_models: dict[str, dict[str, list[str]]] = {}
        self._apply_log()

    def update_log(self, changes: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            for key, value in changes.items():
                if key not in self.log:
                    raise KeyError(key)
                self.log[key] = value
            self._apply_log()
            return dict(self.log)

    def _apply_log(self) -> None:
        level = logging.ERROR
        if self.log["log_warning"]:
            level = logging.WARNING
        if self.log["log_info"]:
            level = logging.INFO
        if int(self.log["log_verbose_level"]) > 0:
            level = logging.DEBUG
        logging.getLogger("asr_server").setLevel(level)

    def trace(self, model: str = "") -> dict[str, list[str]]:
        with self._lock:
            merged = {k: list(v) for k, v in self.trace_global.items()}
            merged.update({k: list(v) for k, v in self.trace_models.get(model, {}).items()})
            return merged

    def update_trace(self, model: str, changes: dict[str, list[str]]) -> dict[str, list[str]]:
        with self._lock:
            target = self.trace_models.setdefault(model, {}) if model else self.trace_global
            for key, values in changes.items():
                if key not in _TRACE_DEFAULTS:
                    raise KeyError(key)
                if values:
                    target[key] = list(values)
                else:  # an empty value resets the setting
                    target.pop(key, None) if model else target.__setitem__(key, list(_TRACE_DEFAULTS[key]))
        return self.trace(model)
