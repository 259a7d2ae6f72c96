"""Loading, unloading and polling the models of one or more repositories.

The manager owns model lifecycles: for each loaded version it creates the backend instances
(instance_group), runs their `load()` off the event loop, and wires them to a scheduler. A model that fails
to load is UNAVAILABLE with its reason while the others serve. Reloading builds the new versions first and
swaps them in, so a model keeps serving while it reloads (as Triton does).

Ensembles follow Triton's dependency rules (server docs/user_guide/model_management.md, checked against
tritonserver 2.51): loading an ensemble first loads those of its steps that are not loaded; unloading it with
`unload_dependents` also unloads the steps that were loaded only along with it and that no other loaded
ensemble uses; in poll mode an ensemble whose steps are not in the repository yet is loaded on the poll that
finds them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import enum
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from tritonclient.grpc import model_config_pb2 as mc

from asr_server.gpu import devices as gpu_devices
from asr_server.backends.base import Backend, ModelContext, backend_class
from asr_server.errors import ErrorCode, ServerError, as_server_error, unknown_model
from asr_server.repository import config as config_io
from asr_server.repository import paths, validation
from asr_server.repository import versions as version_io
from asr_server.repository import warmup
from asr_server.scheduling.base import Scheduler
from asr_server.scheduling.factory import make_scheduler
from asr_server.scheduling.instances import Instance, InstancePool
from asr_server.model_stats import ModelStatistics
from asr_server.server_port import ServerPort

log = logging.getLogger(__name__)


class ModelState(enum.Enum):
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"


@dataclasses.dataclass
class LoadedVersion:
    """One version of one model, ready to take requests."""

    name: str
    version: int
    config: mc.ModelConfig
    scheduler: Scheduler  # made by scheduling.factory.make_scheduler
    pool: Optional[InstancePool]  # None for an ensemble
    stats: ModelStatistics

    @functools.cached_property  # asked for every streamed request; a loaded version's config never changes
    def decoupled(self) -> bool:
        return self.config.model_transaction_policy.decoupled

    @functools.cached_property
    def request_rules(self):
        """The config's rules for requests, read once (validation.RequestRules)."""
        return validation.RequestRules.of(self.config)


@dataclasses.dataclass
class ModelEntry:
    """A model as RepositoryIndex reports it."""

    name: str
    state: ModelState = ModelState.UNAVAILABLE
    reason: str = ""
    config: Optional[mc.ModelConfig] = None
    versions: dict[int, LoadedVersion] = dataclasses.field(default_factory=dict)
    fingerprint: tuple = ()
    model_dir: Optional[Path] = None
    temp_dir: Optional[Path] = None  # the folder made for a load with `file:` contents; removed with the model
    explicit: bool = True  # loaded by name; False: only as an ensemble's step (unload_dependents may unload it)
    missing_steps: frozenset = frozenset()  # an ensemble's steps absent from the repository when its load failed


class ModelManager:
    def __init__(self, repositories: list[Path], port: Optional[ServerPort] = None) -> None:
        """`port`: how the models this manager loads call back into the server (BLS, ensemble steps);
        handed to every backend instance and ensemble scheduler. None: they cannot (tests, tools)."""
        self.repositories = [Path(p) for p in repositories]
        self.models: dict[str, ModelEntry] = {}
        self._port = port
        self._locks: dict[str, asyncio.Lock] = {}

    # ---- lookup -------------------------------------------------------------------------------
    def find_model_dir(self, name: str) -> Optional[Path]:
        if not paths.is_plain_name(name):
            return None
        for repo in self.repositories:
            candidate = repo / name
            if candidate.is_dir():
                return candidate
        return None

    def repository_names(self) -> list[str]:
        names: set[str] = set()
        for repo in self.repositories:
            names.update(version_io.list_model_dirs(repo))
        return sorted(names)

    def get(self, name: str, version: str = "") -> LoadedVersion:
        """The version a request for (name, version) runs on; raises NOT_FOUND like Triton."""
        entry = self.models.get(name)
        if entry is None:
            raise unknown_model(name)
        if not entry.versions:
            raise ServerError(f"Request for unknown model: '{name}' has no available versions", ErrorCode.NOT_FOUND)
        if version in ("", "-1"):
            return entry.versions[max(entry.versions)]
        try:
            number = int(version)
        except ValueError:
            raise ServerError(f"failed to parse version '{version}' of model '{name}'", ErrorCode.INVALID_ARGUMENT)
        if number not in entry.versions:
            # Triton's wording differs for a version the repository has (but does not serve) and one it lacks.
            present = entry.model_dir is not None and (entry.model_dir / str(number)).is_dir()
            state = "is not at ready state" if present else "is not found"
            raise ServerError(f"Request for unknown model: '{name}' version {number} {state}", ErrorCode.NOT_FOUND)
        return entry.versions[number]

    def entry(self, name: str) -> ModelEntry:
        entry = self.models.get(name)
        if entry is None:
            raise unknown_model(name)
        return entry

    # ---- lifecycle ----------------------------------------------------------------------------
    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    async def load(
        self, name: str, config_override: Optional[str] = None, files: Optional[dict[str, bytes]] = None,
        step_of: tuple[str, ...] = (),
    ) -> ModelEntry:
        """(Re)load a model from its folder; the old versions serve until the new ones are ready.
        `files` ({"1/model.onnx": bytes}) replaces the folder by one made of these files (RepositoryModelLoad).
        `step_of`: the ensembles (outermost first) that load this model as a step; empty for a load by name."""
        paths.check_model_name(name)
        async with self._lock(name):
            temp_dir = None
            if files:
                temp_dir = await asyncio.to_thread(self._materialise, name, files)
                model_dir = temp_dir / name
            else:
                model_dir = self.find_model_dir(name)
            if model_dir is None:
                raise paths.poll_failed(name)
            entry = self.models.setdefault(name, ModelEntry(name=name))
            previous_dir, entry.model_dir = entry.model_dir, model_dir
            previous = dict(entry.versions)
            if not step_of:
                entry.explicit = True
            elif not previous:
                entry.explicit = False
            entry.missing_steps = frozenset()
            if not previous:
                entry.state = ModelState.LOADING
            new_versions: dict[int, LoadedVersion] = {}
            try:
                # Before anything is read: a file changed while this load runs then differs from the recorded
                # state, and the next poll loads again (taken after the load, it would hide that change). A model
                # whose load writes into its own folder (outside __pycache__) is therefore loaded once more.
                fingerprint = await asyncio.to_thread(version_io.fingerprint, model_dir)
                config, numbers = await asyncio.to_thread(self._prepare, model_dir, name, config_override)
                if config.platform == "ensemble":
                    await self._load_steps(entry, config, (*step_of, name))
                for number in numbers:
                    new_versions[number] = await self._load_version(model_dir, name, number, config)
            except BaseException as exc:  # noqa: BLE001 - one broken model must not stop the others
                error = as_server_error(exc)
                log.error("failed to load '%s': %s", name, error.message)
                for loaded in new_versions.values():  # the versions that did load go with the failed ones
                    await self._unload_version(loaded)
                if previous:
                    entry.model_dir = previous_dir  # the old versions keep serving from there
                else:
                    entry.state, entry.reason = ModelState.UNAVAILABLE, error.message
                if temp_dir is not None:
                    await asyncio.to_thread(_remove_tree, temp_dir)
                raise ServerError(f"load failed for model '{name}': {error.message}", error.code) from None
            entry.config, entry.versions, entry.fingerprint = config, new_versions, fingerprint
            entry.state, entry.reason = ModelState.READY, ""
            for old in previous.values():
                await self._unload_version(old)
            old_temp, entry.temp_dir = entry.temp_dir, temp_dir
            if old_temp is not None and old_temp != temp_dir:
                await asyncio.to_thread(_remove_tree, old_temp)
            log.info("successfully loaded '%s' version(s) %s", name, sorted(new_versions))
            return entry

    async def _load_steps(self, entry: ModelEntry, config: mc.ModelConfig, chain: tuple[str, ...]) -> None:
        """Load the steps of ensemble `entry` that have no loaded version (Triton loads an ensemble's composing
        models with it). `chain`: the ensembles being loaded, outermost first, to refuse a cycle."""
        steps = list(dict.fromkeys(step.model_name for step in config.ensemble_scheduling.step))
        for step in steps:
            if step in chain:
                cycle = " -> ".join((*chain[chain.index(step):], step))
                raise ServerError(f"circular dependency between ensembles: {cycle}", ErrorCode.INVALID_ARGUMENT)
        missing = [s for s in steps if not paths.is_plain_name(s) or self.find_model_dir(s) is None]
        if missing:
            entry.missing_steps = frozenset(missing)
            raise ServerError(f"ensemble {entry.name} contains models that are not available or ambiguous: "
                              f"{', '.join(missing)}", ErrorCode.INVALID_ARGUMENT)
        for step in steps:
            loaded = self.models.get(step)
            if loaded is not None and loaded.versions:
                continue
            try:
                await self.load(step, step_of=chain)
            except ServerError as exc:
                cycle = exc.message.find("circular dependency between ensembles")
                if cycle >= 0:  # reported as found, not as the step's failure
                    raise ServerError(exc.message[cycle:], ErrorCode.INVALID_ARGUMENT) from None
                raise ServerError(f"ensemble '{entry.name}' depends on '{step}' which is not valid",
                                  ErrorCode.INVALID_ARGUMENT) from None

    @staticmethod
    def _materialise(name: str, files: dict[str, bytes]) -> Path:
        """A new temporary folder holding `<name>/<path>` for each file; every path is checked before
        anything is written. Returns the temporary folder (the caller removes it with the model)."""
        relatives = [paths.check_file_path(relative) for relative in files]
        temp_dir = Path(tempfile.mkdtemp(prefix="asr_server_model_"))
        root = (temp_dir / name).resolve()
        try:
            for relative, data in zip(relatives, files.values()):
                target = root / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                if root not in target.resolve().parents:  # a symlink on the way (cannot happen in a fresh folder)
                    raise paths.invalid_file(relative)
                target.write_bytes(data)
        except BaseException:
            _remove_tree(temp_dir)
            raise
        return temp_dir

    def _prepare(self, model_dir: Path, name: str, override: Optional[str]) -> tuple[mc.ModelConfig, list[int]]:
        config = config_io.config_from_json(override) if override else config_io.read_config(model_dir)
        available = version_io.available_versions(model_dir)
        # The GPUs seen decide KIND_AUTO (GPU when there is one) and fill KIND_GPU groups' ids; with none seen
        # the checks stay off (None), as before, so KIND_GPU configs still load on CPU-only machines.
        config = config_io.complete_config(config, model_dir, available, gpus=gpu_devices.visible_gpus() or None)
        numbers = version_io.select_versions(config, available)
        if not numbers:
            raise ServerError(f"at least one version must be available under the version policy of model '{name}'")
        return config, numbers

    async def _load_version(self, model_dir: Path, name: str, number: int, config: mc.ModelConfig) -> LoadedVersion:
        stats = ModelStatistics()
        if config.platform == "ensemble":
            self._check_steps_loaded(config)
            scheduler = make_scheduler(config, model_dir, stats, port=self._port)
            return LoadedVersion(name, number, config, scheduler, None, stats)
        cls = backend_class(config.backend)
        backends = [cls(ctx) for ctx in self._contexts(model_dir, name, number, config)]
        samples = warmup.sample_requests(config, model_dir)  # malformed samples fail before anything loads
        decoupled = config.model_transaction_policy.decoupled
        loaded: list[Backend] = []
        try:
            for backend in backends:
                await asyncio.to_thread(backend.load)
                loaded.append(backend)
                if samples:
                    await asyncio.to_thread(warmup.warm_up, backend, samples, decoupled)
        except BaseException:
            for backend in loaded:
                await asyncio.to_thread(backend.unload)
            raise
        pool = InstancePool([Instance(b) for b in backends], stats, config.model_transaction_policy.decoupled)
        try:
            scheduler = make_scheduler(config, model_dir, stats, pool=pool, backend=cls)
        except BaseException:  # the version does not load: its instances' threads and backends go with it
            pool.shutdown()
            for backend in backends:
                try:
                    await asyncio.to_thread(backend.unload)
                except Exception:  # noqa: BLE001 - the others still unload; the load's own error goes up
                    log.exception("unloading instance '%s' failed", backend.context.instance_name)
            raise
        return LoadedVersion(name, number, config, scheduler, pool, stats)

    def _check_steps_loaded(self, config: mc.ModelConfig) -> None:
        for dependency in sorted({step.model_name for step in config.ensemble_scheduling.step}):
            entry = self.models.get(dependency)
            if entry is None or not entry.versions:
                raise ServerError(
                    f"ensemble '{config.name}' depends on '{dependency}' which has no loaded version",
                    ErrorCode.INVALID_ARGUMENT,
                )

    def _contexts(self, model_dir: Path, name: str, number: int, config: mc.ModelConfig) -> list[ModelContext]:
        contexts = []
        for group in config.instance_group:
            kind = mc.ModelInstanceGroup.Kind.Name(group.kind)
            devices = list(group.gpus) or [0]
            for index in range(max(1, group.count)):
                contexts.append(
                    ModelContext(
                        name=name,
                        version=number,
                        config=config,
                        model_dir=model_dir,
                        version_dir=model_dir / str(number),
                        instance_name=f"{group.name or name}_{index}",
                        instance_kind=kind,
                        device_id=devices[index % len(devices)],
                        port=self._port,
                    )
                )
        return contexts

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """Unload a model (a model that is not loaded: nothing to do, as in Triton). With `unload_dependents`,
        an ensemble's steps that were loaded only along with it and that no other loaded ensemble uses are
        unloaded too (Triton's RepositoryModelUnload parameter)."""
        steps: list[str] = []
        async with self._lock(name):
            entry = self.models.get(name)
            if entry is None:
                return
            if entry.config is not None and entry.config.platform == "ensemble":
                steps = list(dict.fromkeys(s.model_name for s in entry.config.ensemble_scheduling.step))
            versions, entry.versions = entry.versions, {}
            entry.state, entry.reason = ModelState.UNLOADING, ""
            for version in versions.values():
                await self._unload_version(version)
            if entry.temp_dir is not None:
                await asyncio.to_thread(_remove_tree, entry.temp_dir)
                entry.temp_dir = None
            entry.state, entry.reason = ModelState.UNAVAILABLE, "unloaded"
            log.info("successfully unloaded '%s'", name)
        if unload_dependents:
            for step in steps:
                dependent = self.models.get(step)
                if dependent is not None and dependent.versions and not dependent.explicit \
                        and not self._used_by_loaded_ensemble(step):
                    await self.unload(step, unload_dependents=True)

    def _used_by_loaded_ensemble(self, name: str) -> bool:
        return any(e.versions and e.config is not None and e.config.platform == "ensemble"
                   and any(s.model_name == name for s in e.config.ensemble_scheduling.step)
                   for e in self.models.values())

    async def _unload_version(self, version: LoadedVersion) -> None:
        await version.scheduler.stop()
        if version.pool is not None:
            for instance in version.pool.instances:
                try:
                    await asyncio.to_thread(instance.backend.unload)
                except Exception:  # noqa: BLE001 - unloading continues for the other instances
                    log.exception("unloading instance '%s' failed", instance.name)
            await asyncio.to_thread(version.pool.shutdown)

    async def load_many(self, names: list[str]) -> None:
        """Load several models, ensembles last (they need their steps); failures are recorded on their
        entries, not raised."""
        for name in sorted(names, key=lambda n: (self._is_ensemble(n), n)):
            try:
                await self.load(name)
            except ServerError:
                pass

    def _is_ensemble(self, name: str) -> bool:
        model_dir = self.find_model_dir(name)
        try:
            return model_dir is not None and config_io.read_config(model_dir).platform == "ensemble"
        except ServerError:
            return False

    async def poll(self) -> bool:
        """Poll mode: load new models, reload changed ones, unload removed ones. True if it did any."""
        changed = False
        present = set(self.repository_names())
        for name in sorted(present):
            entry = self.models.get(name)
            model_dir = self.find_model_dir(name)
            if model_dir is None:
                continue
            fingerprint = await asyncio.to_thread(version_io.fingerprint, model_dir)
            # An ensemble that failed for want of steps is retried once one of them is in the repository.
            steps_arrived = entry is not None and not entry.versions and any(
                self.find_model_dir(step) is not None for step in entry.missing_steps)
            if entry is None or entry.fingerprint != fingerprint or steps_arrived:
                changed = True
                try:
                    await self.load(name)
                except ServerError:
                    self.models[name].fingerprint = fingerprint  # do not retry a broken model every poll
        for name in sorted(set(self.models) - present):
            if self.models[name].versions:
                changed = True
                await self.unload(name)
        return changed

    async def shutdown(self) -> None:
        for name in list(self.models):
            if self.models[name].versions:
                await self.unload(name)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
