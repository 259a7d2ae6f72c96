"""TensorRT optimisation profiles derived from a model's config.pbtxt (no TensorRT needed).

A profile gives every engine input a (min, opt, max) shape. The batch axis runs 1 / opt / `max_batch_size`,
where opt is the largest preferred batch size the config's batcher aims for (else max_batch_size). Fixed dims
come from the config; a dynamic dim (-1) takes its range from DYNAMIC_AXES (WeNet's recipe: the offline encoder
sees 16 / 512 / 2048 fbank frames), overridable per input with `--shape name:axis=min,opt,max`.
Inputs declared with `reshape: { shape: [ ] }` are (B,) inside the engine, as the graph exported them;
implicit-state inputs (sequence_batching.state) are engine inputs too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Mapping, Optional, Sequence

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

# (input name, axis counted without the batch dim) -> (min, opt, max) for dims the config leaves dynamic.
DYNAMIC_AXES: dict[tuple[str, int], tuple[int, int, int]] = {
    ("speech", 0): (16, 512, 2048),  # fbank frames, 10 ms each: 0.16 s .. 20 s (WeNet's TensorRT recipe)
    ("encoder_out", 0): (1, 128, 512),  # encoder frames after 4x subsampling of <= 2048 fbank frames
    ("hyps_pad_sos_eos", 1): (2, 32, 128),  # tokens per hypothesis + <sos>/<eos>
    ("r_hyps_pad_sos_eos", 1): (2, 32, 128),
}


@dataclasses.dataclass(frozen=True)
class Profile:
    """One optimisation profile: input name -> shapes including the batch dim."""

    min: dict[str, tuple[int, ...]]  # smallest shape each input may take under this profile
    opt: dict[str, tuple[int, ...]]  # the shape TensorRT tunes its kernels for
    max: dict[str, tuple[int, ...]]  # largest shape; bounds the engine's memory

    @property
    def batch_range(self) -> tuple[int, int]:
        """(smallest, largest) batch this profile serves; the backend picks a profile by it."""
        first = next(iter(self.min))
        return self.min[first][0], self.max[first][0]


def load_config(path: Path) -> mc.ModelConfig:
    return text_format.Parse(Path(path).read_text(), mc.ModelConfig())


def preferred_opt_batch(config: mc.ModelConfig) -> int:
    """The batch TensorRT should tune for: the batcher's largest preferred size within max_batch_size."""
    preferred = list(config.dynamic_batching.preferred_batch_size)
    preferred += list(config.sequence_batching.oldest.preferred_batch_size)
    preferred = [size for size in preferred if 0 < size <= config.max_batch_size]
    return max(preferred) if preferred else max(1, config.max_batch_size)


def engine_inputs(config: mc.ModelConfig) -> dict[str, list[int]]:
    """Engine input name -> dims without the batch dim (after `reshape`), state inputs included."""
    inputs: dict[str, list[int]] = {}
    for io in config.input:
        inputs[io.name] = list(io.reshape.shape) if io.HasField("reshape") else list(io.dims)
    for state in config.sequence_batching.state:
        inputs[state.input_name] = list(state.dims)
    # Control inputs (START/END/READY/CORRID) are fed to the model too when the graph declares them; the
    # project's streaming encoder takes none, so they are left to --shape if ever needed.
    return inputs


def parse_shape_overrides(specs: Sequence[str]) -> dict[tuple[str, int], tuple[int, int, int]]:
    """`name:axis=min,opt,max` (axis without the batch dim) -> {(name, axis): (min, opt, max)}."""
    overrides = {}
    for spec in specs:
        try:
            name, rest = spec.split(":", 1)
            axis, values = rest.split("=", 1)
            low, opt, high = (int(v) for v in values.split(","))
        except ValueError:
            raise ValueError(f"--shape '{spec}': expected name:axis=min,opt,max") from None
        if not 1 <= low <= opt <= high:
            raise ValueError(f"--shape '{spec}': need 1 <= min <= opt <= max")
        overrides[(name, int(axis))] = (low, opt, high)
    return overrides


def derive_profiles(config: mc.ModelConfig, overrides: Optional[Mapping] = None,
                    split_batch: int = 0) -> list[Profile]:
    """Profiles for `config`'s inputs. split_batch=K (1 <= K < max_batch_size) makes two profiles, batch
    1..K and K+1..max, so small batches run kernels tuned for them; 0 makes one profile 1..max."""
    axes = {**DYNAMIC_AXES, **(overrides or {})}
    max_batch = config.max_batch_size
    if max_batch <= 0:
        raise ValueError(f"model '{config.name}': max_batch_size 0 is not supported here (engines are batched)")
    ranges = [(1, max_batch)]
    if split_batch:
        if not 1 <= split_batch < max_batch:
            raise ValueError(f"--split-batch {split_batch}: must lie in 1..{max_batch - 1}")
        ranges = [(1, split_batch), (split_batch + 1, max_batch)]
    opt_batch = preferred_opt_batch(config)
    profiles = []
    for low_batch, high_batch in ranges:
        opt = min(max(opt_batch, low_batch), high_batch)
        shapes: dict[str, dict[str, tuple[int, ...]]] = {"min": {}, "opt": {}, "max": {}}
        for name, dims in engine_inputs(config).items():
            lows, opts, highs = [low_batch], [opt], [high_batch]
            for axis, dim in enumerate(dims):
                if dim >= 0:
                    lows.append(dim), opts.append(dim), highs.append(dim)
                    continue
                if (name, axis) not in axes:
                    raise ValueError(f"model '{config.name}' input '{name}' axis {axis} is dynamic and has no "
                                     f"range: pass --shape {name}:{axis}=MIN,OPT,MAX")
                low, mid, high = axes[(name, axis)]
                lows.append(low), opts.append(mid), highs.append(high)
            shapes["min"][name], shapes["opt"][name], shapes["max"][name] = tuple(lows), tuple(opts), tuple(highs)
        profiles.append(Profile(**shapes))
    return profiles


def trtexec_shapes(profile: Profile) -> list[str]:
    """trtexec's --minShapes/--optShapes/--maxShapes arguments for one profile."""
    def joined(shapes: dict[str, tuple[int, ...]]) -> str:
        return ",".join(f"{name}:{'x'.join(str(d) for d in dims)}" for name, dims in shapes.items())
    return [f"--minShapes={joined(profile.min)}", f"--optShapes={joined(profile.opt)}",
            f"--maxShapes={joined(profile.max)}"]


def pick_profile(ranges: Sequence[tuple[int, int]], batch: int) -> int:
    """Index of the first profile whose batch range holds `batch` (the backend's choice per execution)."""
    for index, (low, high) in enumerate(ranges):
        if low <= batch <= high:
            return index
    raise ValueError(f"batch {batch} is outside every optimisation profile {list(ranges)}")
