"""The op registry: every op kind of a plan, one module each (see :mod:`codegen.ops.base`).

``kind_of(op)`` is the only way the rest of cisl learns what an op does. Adding an op kind means
adding one module here (its attributes, rules, quantisation, references, C context, footprint)
and its C template ``templates/ops/<kind>.c.j2``; docs/design/architecture.md walks through it.
Modules are found by name, so nothing else has to list them.
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import OpKind

REGISTRY: dict[str, OpKind] = {}
_NOT_KINDS = {"base", "schema"}


def register(cls: type[OpKind]) -> type[OpKind]:
    """Class decorator of every op kind: one instance per kind, under its name."""
    if cls.name in REGISTRY:
        raise AssertionError(f"op kind {cls.name} registered twice")
    REGISTRY[cls.name] = cls()
    return cls


def _load_all() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name not in _NOT_KINDS and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


class UnknownOp(KeyError):
    """An op kind the registry does not know (the message names the op and its tensors)."""

    def __str__(self) -> str:
        return str(self.args[0])


def kind_of(op_or_kind) -> OpKind:
    """The registered kind of an op (or of a kind name)."""
    name = op_or_kind if isinstance(op_or_kind, str) else op_or_kind.kind
    k = REGISTRY.get(name)
    if k is None:
        where = "" if isinstance(op_or_kind, str) else (
            f" ({', '.join(op_or_kind.ins) or '-'} -> {', '.join(op_or_kind.outs) or '-'})")
        raise UnknownOp(f"unknown op kind {name!r}{where}; this cisl knows {', '.join(sorted(REGISTRY))}")
    return k


def kinds() -> list[str]:
    return sorted(REGISTRY)


_load_all()

__all__ = ["REGISTRY", "OpKind", "UnknownOp", "kind_of", "kinds", "register"]
