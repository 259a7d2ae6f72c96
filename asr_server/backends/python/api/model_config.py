"""The model config as python models see it: a dict, and the `ModelConfig` handed to auto_complete_config."""

from __future__ import annotations

import json
from typing import Optional, Union


def get_input_config_by_name(model_config: dict, name: str) -> Optional[dict]:
    """The config dict's input called `name` (`model_config["input"]` entry), or None."""
    for item in model_config.get("input", []):
        if item["name"] == name:
            return item
    return None


def get_output_config_by_name(model_config: dict, name: str) -> Optional[dict]:
    """The config dict's output called `name` (`model_config["output"]` entry), or None."""
    for item in model_config.get("output", []):
        if item["name"] == name:
            return item
    return None


def using_decoupled_model_transaction_policy(model_config: dict) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


class ModelConfig:
    """The config handed to `TritonPythonModel.auto_complete_config`; the model may fill in inputs,
    outputs, max_batch_size, dynamic batching and the transaction policy, never contradict the file."""

    _INPUT_KEYS = ("name", "data_type", "dims", "optional")
    _OUTPUT_KEYS = ("name", "data_type", "dims")

    def __init__(self, model_config: Union[str, dict]) -> None:
        self._model_config = json.loads(model_config) if isinstance(model_config, str) else dict(model_config)
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)
        self._model_config.setdefault("name", "")

    @property
    def _name(self) -> str:
        return self._model_config["name"]

    def as_dict(self) -> dict:
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        configured = self._model_config["max_batch_size"]
        if configured > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {configured}, but in auto-complete-config "
                f"function for model '{self._name}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = int(max_batch_size)

    def set_dynamic_batching(self) -> None:
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but auto-complete-config "
                    f"function for model '{self._name}' tries to set scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict) -> None:  # noqa: A002 - Triton's parameter name
        self._add_tensor("input", input, self._INPUT_KEYS)

    def add_output(self, output: dict) -> None:
        self._add_tensor("output", output, self._OUTPUT_KEYS)

    def _add_tensor(self, kind: str, spec: dict, allowed: tuple[str, ...]) -> None:
        """Append a tensor, or complete the file's tensor of that name (which must agree with it)."""
        label = spec.get("name", "?")
        extra = [key for key in spec if key not in allowed]
        if extra:
            raise ValueError(
                f"{kind} '{label}' in auto-complete-config function for model '{self._name}' contains "
                f"property other than {', '.join(repr(k) for k in allowed)}."
            )
        for key in ("name", "data_type", "dims"):
            if key not in spec:
                raise ValueError(
                    f"{kind} '{label}' in auto-complete-config function for model '{self._name}' "
                    f"is missing '{key}' property."
                )
        for existing in self._model_config[kind]:
            if existing["name"] != spec["name"]:
                continue
            known_type = existing.get("data_type", "TYPE_INVALID")
            if known_type != "TYPE_INVALID" and known_type != spec["data_type"]:
                raise ValueError(
                    f"unable to load model '{self._name}', configuration expects datatype {known_type} "
                    f"for {kind} '{label}', model provides {spec['data_type']}"
                )
            known_dims = [int(d) for d in existing.get("dims", [])]
            if known_dims and known_dims != [int(d) for d in spec["dims"]]:
                raise ValueError(
                    f"model '{self._name}', tensor '{label}': the model expects dims {list(spec['dims'])} "
                    f"but the model configuration specifies dims {known_dims}"
                )
            if "optional" in existing and "optional" in spec and existing["optional"] != spec["optional"]:
                raise ValueError(
                    f"model '{self._name}', tensor '{label}': the model expects optional {spec['optional']} "
                    f"but the model configuration specifies optional {existing['optional']}"
                )
            existing.update(spec)
            return
        self._model_config[kind].append(dict(spec))

    def set_model_transaction_policy(self, transaction_policy_dict: dict) -> None:
        extra = [key for key in transaction_policy_dict if key != "decoupled"]
        if extra:
            raise ValueError(
                f"model transaction property in auto-complete-config function for model '{self._name}' "
                "contains property other than 'decoupled'."
            )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = bool(transaction_policy_dict["decoupled"])
            if "decoupled" in policy and bool(policy["decoupled"]) != wanted:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted
