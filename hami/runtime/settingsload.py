"""Reading `hami serve`'s settings: one flag per Settings field, HAMI_* environment variables
and a YAML file, in that precedence, coerced to each field's type and validated once
(hami.runtime.config holds the settings and their rules)."""

import argparse
import os
import socket
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from hami.files import UnreadableFileError, read_text
from hami.runtime.config import ConfigError, Settings, flag_name, validate
from hami.runtime.settings_help import HELP


def _shown_default(name: str, value: object) -> str:
    if name == "identity":
        return "$POD_NAME, else the hostname"
    if name == "pod_namespace":
        return "$POD_NAMESPACE"
    if isinstance(value, bool):
        return str(value).lower()
    return "none" if value == "" else str(value)


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """One flag per setting. Flags default to None so that a setting not given on the command
    line falls through to the environment and the file; the help shows the real default."""
    p.add_argument("--config", help="YAML file with these settings (keys as flags, - or _)")
    for f in fields(Settings):
        kind = bool if f.type is bool or f.type == "bool" else None
        help_ = f"{HELP[f.name]} (default: {_shown_default(f.name, f.default)}; env HAMI_{f.name.upper()})"
        if kind is bool:
            p.add_argument(
                flag_name(f.name),
                dest=f.name,
                default=None,
                type=parse_bool,
                metavar="BOOL",
                help=help_,
            )
        else:
            p.add_argument(flag_name(f.name), dest=f.name, default=None, help=help_)


def parse_bool(value: str) -> bool:
    v = str(value).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not a boolean")


def _coerce(name: str, kind: type, value: Any, source: str) -> Any:
    try:
        if kind is bool:
            return value if isinstance(value, bool) else parse_bool(str(value))
        if kind is int:
            if isinstance(value, bool):
                raise ValueError
            return int(value)
        if kind is float:
            return float(value)
        return str(value)
    except (ValueError, argparse.ArgumentTypeError):
        raise ConfigError(f"{source}: {name} must be {kind.__name__}, got {value!r}") from None


_TYPES = {"bool": bool, "int": int, "float": float, "str": str}


def load_settings(args: argparse.Namespace, env: dict[str, str] | None = None) -> Settings:
    env = dict(os.environ) if env is None else env
    file_values: dict[str, Any] = {}
    if getattr(args, "config", None):
        path = Path(args.config)
        try:
            raw = yaml.safe_load(read_text(path)) or {}
        except UnreadableFileError as e:
            raise ConfigError(f"config file {e}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path}: {e}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"config file {path}: expected a mapping of settings")
        file_values = {str(k).replace("-", "_"): v for k, v in raw.items()}
        known = {f.name for f in fields(Settings)}
        unknown = sorted(set(file_values) - known)
        if unknown:
            raise ConfigError(f"config file {path}: unknown settings {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for f in fields(Settings):
        kind = _TYPES[f.type if isinstance(f.type, str) else f.type.__name__]
        env_name = "HAMI_" + f.name.upper()
        if getattr(args, f.name, None) is not None:
            values[f.name] = _coerce(
                f.name, kind, getattr(args, f.name), "flag " + flag_name(f.name)
            )
        elif env_name in env:
            values[f.name] = _coerce(f.name, kind, env[env_name], "environment " + env_name)
        elif f.name in file_values:
            values[f.name] = _coerce(f.name, kind, file_values[f.name], "config file")
    settings = Settings(**values)
    if not settings.identity:
        values["identity"] = env.get("POD_NAME") or socket.gethostname()
    if not settings.pod_namespace:
        values["pod_namespace"] = env.get("POD_NAMESPACE", "")
    settings = Settings(**values)
    validate(settings)
    return settings
