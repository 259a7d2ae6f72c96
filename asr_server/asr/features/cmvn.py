"""WeNet ``global_cmvn`` files: accumulated feature statistics, turned into (mean, istd) for GlobalCMVN.

WeNet's ``tools/compute_cmvn_stats.py`` writes JSON ``{"mean_stat": [D], "var_stat": [D], "frame_num": N}``
where ``mean_stat`` is the per-dim sum and ``var_stat`` the per-dim sum of squares. Older recipes use Kaldi's
text matrix (``[ sums... count \n squares... 0 ]``); both are read here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

VAR_FLOOR = 1.0e-20  # WeNet's floor before 1/sqrt, so constant dims do not divide by zero


@dataclass
class CmvnStats:
    mean_stat: np.ndarray  # (D,) float64, sum of features
    var_stat: np.ndarray   # (D,) float64, sum of squared features
    frame_num: int         # frames accumulated

    @classmethod
    def zeros(cls, dim: int) -> "CmvnStats":
        return cls(np.zeros(dim, np.float64), np.zeros(dim, np.float64), 0)

    def accumulate(self, feats: np.ndarray) -> None:
        """feats: (T, D) features of one utterance."""
        f = np.asarray(feats, dtype=np.float64)
        self.mean_stat += f.sum(axis=0)
        self.var_stat += (f * f).sum(axis=0)
        self.frame_num += f.shape[0]

    def mean_istd(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean (D,), istd (D,)) float32 as GlobalCMVN uses them: x_norm = (x - mean) * istd."""
        if self.frame_num <= 0:
            raise ValueError("CMVN statistics are empty")
        mean = self.mean_stat / self.frame_num
        var = np.maximum(self.var_stat / self.frame_num - mean * mean, VAR_FLOOR)
        return mean.astype(np.float32), (1.0 / np.sqrt(var)).astype(np.float32)


def save_json_cmvn(stats: CmvnStats, path: str | Path) -> None:
    Path(path).write_text(json.dumps({"mean_stat": stats.mean_stat.tolist(), "var_stat": stats.var_stat.tolist(),
                                      "frame_num": int(stats.frame_num)}))


def load_cmvn(path: str | Path, is_json: bool | None = None) -> CmvnStats:
    """Read a WeNet JSON ``global_cmvn`` or a Kaldi text CMVN matrix (detected when ``is_json`` is None)."""
    text = Path(path).read_text()
    if is_json is None:
        is_json = text.lstrip().startswith("{")
    if is_json:
        d = json.loads(text)
        return CmvnStats(np.asarray(d["mean_stat"], np.float64), np.asarray(d["var_stat"], np.float64),
                         int(d["frame_num"]))
    # Kaldi text: "[ s_1 ... s_D N \n q_1 ... q_D 0 ]"
    rows = [r.split() for r in text.replace("[", " ").replace("]", " ").strip().splitlines() if r.split()]
    if len(rows) != 2:
        raise ValueError(f"{path}: expected a 2-row Kaldi CMVN matrix")
    first, second = (np.asarray(r, np.float64) for r in rows)
    return CmvnStats(first[:-1], second[:-1], int(first[-1]))
