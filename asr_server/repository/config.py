"""Reading a model folder's config into Triton's `ModelConfig` and completing it the way Triton does.

A model manager calls, per model folder:
    config = read_config(model_dir)            # or config_from_json(override) for RepositoryModelLoad
    config = complete_config(config, model_dir, available_versions(model_dir), gpus=...)
`complete_config` ends with `validate_config`, so what it returns is ready to load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.backends.base import BACKEND_TO_PLATFORM, PLATFORM_TO_BACKEND, backend_class
from asr_server.errors import ServerError, invalid_argument
from asr_server.repository.validation import ENSEMBLE_PLATFORM, validate_config

CONFIG_FILENAME = "config.pbtxt"
SEQUENCE_IDLE_DEFAULT_US = 1_000_000  # Triton's default max_sequence_idle_microseconds
# Triton gives CPU instance groups of these backends two instances when the count is left out.
TWO_CPU_INSTANCES_BACKENDS = ("onnxruntime", "tensorflow")
# Backends whose preferred instance kind is CPU (Triton's openvino backend declares it): KIND_AUTO stays CPU
# even where GPUs are seen.
CPU_PREFERRED_BACKENDS = ("openvino",)
# A version folder holding one of these names the backend when the config names neither platform nor
# backend (a folder with only `1/model.onnx` serves as an onnxruntime model).
MODEL_FILE_BACKENDS: tuple[tuple[str, str, str], ...] = (  # (file name, backend, platform)
    ("model.plan", "tensorrt", "tensorrt_plan"),
    ("model.onnx", "onnxruntime", "onnxruntime_onnx"),
    ("model.pt", "pytorch", "pytorch_libtorch"),
    ("model.savedmodel", "tensorflow", "tensorflow_savedmodel"),
    ("model.graphdef", "tensorflow", "tensorflow_graphdef"),
    ("model.xml", "openvino", ""),
    ("model.py", "python", ""),
)


def read_config(model_dir: Path) -> mc.ModelConfig:
    """Parse `<model_dir>/config.pbtxt`; a folder without one yields a config holding only the name,
    for backends that auto-complete (onnxruntime, python)."""
    path = Path(model_dir) / CONFIG_FILENAME
    config = mc.ModelConfig()
    if not path.is_file():
        config.name = Path(model_dir).name
        return config
    try:
        text_format.Parse(path.read_text(encoding="utf-8"), config)
    except (text_format.ParseError, UnicodeDecodeError) as exc:
        raise invalid_argument(f"failed to read text proto from {path}: {exc}") from None
    return config


def config_from_json(text: str) -> mc.ModelConfig:
    """The RepositoryModelLoad `config` override: the JSON form of a ModelConfig (it replaces the file)."""
    try:
        return json_format.Parse(text, mc.ModelConfig())
    except json_format.ParseError as exc:
        raise invalid_argument(f"failed to parse model configuration override: {exc}") from None


def complete_config(
    config: mc.ModelConfig,
    model_dir: Path,
    versions: Sequence[int],
    *,
    gpus: Optional[Sequence[int]] = None,
    auto_complete: bool = True,
) -> mc.ModelConfig:
    """Return a copy of `config` with everything Triton fills in, validated.

    versions: the model's available version numbers; the newest is the one backends auto-complete from.
    gpus: device ids this server may use, as tritonserver checks them: KIND_AUTO groups become KIND_GPU
        when there are some, KIND_GPU groups without ids get all of them, and a KIND_GPU group on a machine
        without GPUs is an error. None (not known): KIND_AUTO is KIND_CPU and KIND_GPU is not checked, so
        the backends fall back to the CPU where they find no GPU.
    auto_complete: False is tritonserver's --disable-auto-complete-config.
    """
    model_dir = Path(model_dir)
    completed = mc.ModelConfig()
    completed.CopyFrom(config)
    _complete_name(completed, model_dir)
    _complete_platform_and_backend(completed, model_dir, versions)
    if completed.platform != ENSEMBLE_PLATFORM and completed.backend:
        backend = _backend_class(completed.backend)
        if not completed.default_model_filename:
            completed.default_model_filename = backend.model_filename_for(completed.platform)
        if auto_complete and versions:
            completed = backend.auto_complete_config(completed, model_dir / str(max(versions)))
    _fill_scheduler_defaults(completed)
    _fill_instance_groups(completed, gpus)
    validate_config(completed, gpus=gpus)
    return completed


def _complete_name(config: mc.ModelConfig, model_dir: Path) -> None:
    if not config.name:
        config.name = model_dir.name
    elif config.name != model_dir.name:
        raise invalid_argument(
            f"unexpected directory name '{model_dir.name}' for model '{config.name}', "
            "directory name must equal model name"
        )


def _complete_platform_and_backend(config: mc.ModelConfig, model_dir: Path, versions: Sequence[int]) -> None:
    if not config.platform and not config.backend:
        detected = _backend_from_model_files(model_dir, versions)
        if detected is not None:
            config.backend, config.platform = detected
        return  # still neither: validate_config reports it
    if config.platform == ENSEMBLE_PLATFORM:
        return
    if config.platform and not config.backend:
        if config.platform not in PLATFORM_TO_BACKEND:
            raise invalid_argument(f"unexpected platform type '{config.platform}' for {config.name}")
        config.backend = PLATFORM_TO_BACKEND[config.platform]
    elif config.backend and not config.platform:
        config.platform = BACKEND_TO_PLATFORM.get(config.backend, "")
        if config.backend == "tensorflow":  # two platforms: Triton tells them apart by the model file
            detected = _backend_from_model_files(model_dir, versions)
            tensorflow_file = detected is not None and detected[0] == "tensorflow"
            config.platform = detected[1] if tensorflow_file else "tensorflow_savedmodel"
    elif PLATFORM_TO_BACKEND.get(config.platform) != config.backend:
        raise invalid_argument(
            f"unexpected 'platform' and 'backend' pair, got:{config.platform}, {config.backend}"
        )


def _backend_from_model_files(model_dir: Path, versions: Sequence[int]) -> Optional[tuple[str, str]]:
    """(backend, platform) named by the model file found in the newest version folder that has one."""
    for version in sorted(versions, reverse=True):
        for filename, backend, platform in MODEL_FILE_BACKENDS:
            if (model_dir / str(version) / filename).exists():
                return backend, platform
    return None


def _backend_class(name: str):
    try:
        return backend_class(name)
    except ServerError:
        raise
    except ImportError as exc:
        # An optional framework (tensorrt, openvino, ...) is not installed here.
        raise invalid_argument(f"unable to load backend '{name}': {exc}") from None


def _fill_scheduler_defaults(config: mc.ModelConfig) -> None:
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if config.HasField("dynamic_batching") and not config.dynamic_batching.preferred_batch_size:
        if config.max_batch_size > 0:
            config.dynamic_batching.preferred_batch_size.append(config.max_batch_size)
    if config.HasField("sequence_batching"):
        batcher = config.sequence_batching
        if batcher.max_sequence_idle_microseconds == 0:
            batcher.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_US
        if batcher.HasField("oldest") and not batcher.oldest.preferred_batch_size:
            if config.max_batch_size > 0:
                batcher.oldest.preferred_batch_size.append(config.max_batch_size)
    if config.platform == ENSEMBLE_PLATFORM:
        config.model_transaction_policy.SetInParent()  # Triton reports an (empty) policy for ensembles
    else:
        optimization = config.optimization
        if not optimization.HasField("input_pinned_memory"):
            optimization.input_pinned_memory.enable = True
        if not optimization.HasField("output_pinned_memory"):
            optimization.output_pinned_memory.enable = True


def _fill_instance_groups(config: mc.ModelConfig, gpus: Optional[Sequence[int]]) -> None:
    """Triton's instance-group normalisation: names, KIND_AUTO resolution, counts, GPU lists."""
    if config.platform == ENSEMBLE_PLATFORM:
        return  # ensembles have no instances of their own
    if not config.instance_group:
        config.instance_group.add(name=config.name)  # a lone default group is named after the model
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
            usable = bool(gpus) and all(gpu in gpus for gpu in group.gpus)
            usable = usable and config.backend not in CPU_PREFERRED_BACKENDS
            group.kind = mc.ModelInstanceGroup.KIND_GPU if usable else mc.ModelInstanceGroup.KIND_CPU
        if group.count < 1:
            two = group.kind == mc.ModelInstanceGroup.KIND_CPU and config.backend in TWO_CPU_INSTANCES_BACKENDS
            group.count = 2 if two else 1
        if group.kind == mc.ModelInstanceGroup.KIND_GPU and not group.gpus and gpus:
            group.gpus.extend(gpus)
