"""Service settings: one typed object per service, read from flags, STRATA_* variables and
defaults, in that order of precedence.

A service defines `class XSettings(StrataSettings)`; each field is one setting: the field
`node_ttl_s` is the variable STRATA_NODE_TTL_S and the flag --node-ttl-s, its description is
what --help prints (with the variable's name appended), and its type and constraints are
checked at start. `load(XSettings, prog)`:

- `--help` lists every setting with its flag, variable, default and meaning, and exits 0
  without binding a port or touching a file;
- `--print-config` prints the resolved settings as the STRATA_* variables that would give them
  (secrets masked) and exits 0;
- a setting that does not validate stops the start with one line per problem, naming the
  variable and the flag (`SettingsError`, exit code 2).

Lists given in a variable or flag are comma-separated (`comma_list`). Modes are StrEnums.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Annotated, Any, TypeVar

from pydantic import BeforeValidator, ValidationError
from pydantic_settings import (
    BaseSettings,
    CliSettingsSource,
    NoDecode,
    SettingsConfigDict,
)

PREFIX = "STRATA_"
SECRET_WORDS = ("password", "token", "key")
_URL_PASSWORD = re.compile(r"(://[^:/@]+:)[^@]*@")
T = TypeVar("T", bound="StrataSettings")


def _split(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


# A tuple of strings given as "a,b,c" in a variable or a flag.
CommaList = Annotated[tuple[str, ...], NoDecode, BeforeValidator(_split)]


class SettingsError(SystemExit):
    """Settings that do not validate, at a service's start: the process exits (code 2) after
    `describe` printed what is wrong."""


class ConfigError(ValueError):
    """Settings that do not validate, for a caller that handles it (`from_env`); the message
    names each variable and what it expects."""


class StrataSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=PREFIX,
        frozen=True,
        extra="ignore",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        use_enum_values=False,
    )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        changed = False
        for name, info in cls.model_fields.items():
            tag = f"[{env_name(name)}]"
            if info.description and tag not in info.description:
                info.description = f"{info.description} {tag}"
                changed = True
        if changed:
            cls.model_rebuild(force=True)

    @classmethod
    def from_env(cls: type[T], **overrides: Any) -> T:
        """The settings from the STRATA_* variables (no flags), `overrides` on top; ConfigError
        naming what does not validate."""
        try:
            return cls(**overrides)
        except ValidationError as err:
            raise ConfigError(describe(err)) from None

    @classmethod
    def env_names(cls) -> list[str]:
        """Every variable these settings read."""
        return [env_name(name) for name in cls.model_fields]

    def as_env(self) -> dict[str, str]:
        """The settings as the variables that would give them (lists comma-joined)."""
        out = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = ",".join(str(v) for v in value)
            elif isinstance(value, bool):
                value = "true" if value else "false"
            out[env_name(name)] = str(value)
        return out


def env_name(field: str) -> str:
    return PREFIX + field.upper()


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def load(cls: type[T], prog: str, argv: Sequence[str] | None = None) -> T:
    """The settings from flags (`argv`, default sys.argv[1:]), variables and defaults; see the
    module docstring for --help and --print-config."""
    args = list(sys.argv[1:] if argv is None else argv)
    print_config = "--print-config" in args
    args = [a for a in args if a != "--print-config"]
    source: CliSettingsSource[argparse.ArgumentParser] = CliSettingsSource(
        cls, cli_prog_name=prog, cli_parse_args=args
    )
    try:
        settings = cls(_cli_settings_source=source(args=args))
    except ValidationError as err:
        print(describe(err), file=sys.stderr)
        raise SettingsError(2) from None
    if print_config:
        for key, value in settings.as_env().items():
            masked = any(w in key.lower() for w in SECRET_WORDS) and value
            shown = "***" if masked else _URL_PASSWORD.sub(r"\1***@", value)
            print(f"{key}={shown}")
        raise SystemExit(0)
    return settings


def describe(err: ValidationError) -> str:
    """One line per problem, naming the variable and the flag."""
    lines = []
    for e in err.errors():
        field = str(e["loc"][0]) if e["loc"] else ""
        where = f"{env_name(field)} ({flag_name(field)}): " if field else ""
        if e["type"] == "missing":
            lines.append(f"{where}required but not set")
            continue
        got = f", got {e['input']!r}" if field and "input" in e else ""
        lines.append(f"{where}{e['msg'].removeprefix('Value error, ')}{got}")
    return "invalid settings:\n  " + "\n  ".join(lines)
