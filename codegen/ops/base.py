"""What an op kind is: the interface every module of :mod:`codegen.ops` implements once.

An op kind owns everything about one step of a node's schedule:

* its **attributes**, a frozen dataclass (:attr:`OpKind.Attrs`) from which plan.json's JSON Schema
  is generated and against which every loaded plan is checked (:mod:`codegen.ops.schema`);
* its **shape rules** (:meth:`OpKind.check`): what a hand-edited plan must still satisfy;
* **quantisation** (:meth:`OpKind.quantize`): the integer attributes and constants it needs;
* the **float and int8 references** (:meth:`OpKind.run`), and for communication ops the message
  it sends and what it makes of what arrives (:meth:`OpKind.message`, :meth:`OpKind.receive`);
* its **C**: the template ``templates/ops/<kind>.c.j2`` and the context it is rendered with
  (:meth:`OpKind.c_context`);
* its **footprint**: constant bytes, stored weights, descriptor tables (the code bytes per op are
  a board's fact, board.toml ``[footprint.ops]``);
* its **work** for the cycle model's per-class tables (:attr:`OpKind.work_unit`).

The quantiser, the executor, the emitter, the footprint model, ``cisl fit``, the QEMU transcript
and the cycle model are loops over the registry; none of them knows an op kind by name.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

# Annotations name the plan's Op and Tensor (codegen/plan/structure.py) and ModelConfig
# (codegen/modelspec.py) as strings: the plan builds on the registry, not the other way round.


# -- attribute field types (how plan.json stores them) ------------------------------------------

class Ranges(list):
    """An ascending index list, stored in plan.json as [[lo, hi), ...] ranges (plan/io.py)."""


class Runs(list):
    """Column copy runs [[src, dst, count], ...]."""


@dataclass(frozen=True)
class WeightRef:
    """A slice of a float model weight: rows (and columns, for matrices) of ``name``."""

    name: str
    rows: Ranges
    cols: Ranges | None = None


@dataclass(frozen=True)
class RecvFrom:
    """What a somegather receives from one sender: how many columns, bytes and where they go."""

    sender: int = field(metadata={"json": "from"})
    cols: int
    bytes: int
    runs: Runs


def quant(default: Any = None) -> Any:
    """A field the quantiser fills in (absent in the structure, required in a compiled plan)."""
    return field(default=default, metadata={"stage": "int8"})


def const_ref() -> Any:
    """A quantised constant of the node, by name (plan.json ``constants``)."""
    return field(default=None, metadata={"stage": "int8", "constant": True})


def tensor_ref(optional: bool = False) -> Any:
    """An activation tensor of the node, by name."""
    return field(default=None, metadata={"tensor": True, "optional": optional})


@dataclass(frozen=True)
class NoAttrs:
    """An op without attributes."""


class PlanShapeError(ValueError):
    """A plan op that breaks its kind's rules: ``field`` names what is wrong."""

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


# -- the contexts the loops hand to an op ----------------------------------------------------------

@dataclass
class QuantContext:
    """What an op's quantisation may use and where its constants go (codegen/plan/quantize.py)."""

    cfg: "ModelConfig"
    q: dict                      # qgroup -> QParams (the whole plan)
    qp: dict                     # tensor name -> QParams (this node)
    weight: Callable             # WeightRef dict -> float64 array of the slice
    head_scale: np.ndarray       # per output channel of the head (one scale for all devices)
    consts: dict[str, np.ndarray]
    # WeightRef dict -> the per-row scales its rows must use (None: from the slice itself); an
    # elastic mode's fc rows use the scales of the largest mode's rows, so its weights are theirs
    row_scale: Callable = lambda ref: None

    def add(self, name: str, value: np.ndarray) -> str:
        self.consts[name] = value
        return name


@dataclass
class EmitContext:
    """What an op's C context may use (codegen/emit/cnode.py)."""

    node: Any                    # NodeData
    tensor: Callable             # tensor name (or None) -> its C macro (or NULL)
    const: dict[str, str]        # constant name -> C symbol
    sg_by_id: dict
    somegathers: list            # descriptors the node file defines (somegather_desc.c.j2)
    # an elastic image's mode m > 0 (codegen/emit/cnode.py emit_node_modes): its symbols' prefix, its
    # exchanges' first index in the image's Mixer schedule, and the shape each constant is stored
    # with (mode 0's, of which this mode uses a prefix)
    prefix: str = ""
    exchange_base: int = 0
    stored: dict | None = None
    strided: frozenset = frozenset()  # fc weights read through cisl_fc_strided_s8 in every mode

    def shape(self, name: str) -> tuple[int, ...]:
        return self.node.tensors[name].shape

    def size(self, name: str) -> int:
        return self.node.tensors[name].size

    def stored_shape(self, const: str) -> tuple[int, ...]:
        """The shape constant ``const`` is stored with in the image (its own, but in an elastic mode)."""
        own = tuple(self.node.constants[const].shape)
        return own if self.stored is None else tuple(self.stored[const])


# -- the kind ----------------------------------------------------------------------------------------

class OpKind:
    """One op kind; subclasses live one per module in codegen/ops/ and register themselves."""

    name: ClassVar[str]
    Attrs: ClassVar[type] = NoAttrs
    #: a communication op: the executor stops every node at it and exchanges messages
    sync: ClassVar[bool] = False
    #: "begin"/"end" for the ops that open and close a block of the schedule
    block_marker: ClassVar[str | None] = None
    #: what the cycle model's per-class table counts for this op ("MAC", "element") or None
    work_unit: ClassVar[str | None] = None

    @property
    def template(self) -> str:
        return f"ops/{self.name}.c.j2"

    # -- plan rules ------------------------------------------------------------------------------
    def check(self, op: "Op", tensors: dict[str, "Tensor"], constants: dict[str, tuple]) -> None:
        """Raise PlanShapeError unless the op's tensors and constants fit together (``constants``:
        name -> (dtype, shape))."""

    # -- numerics --------------------------------------------------------------------------------
    def quantize(self, qc: QuantContext, op: "Op", stem: str) -> None:
        """Fill the op's integer attributes and add its constants (``stem``: a C-name stem)."""

    def run(self, ex: Any, k: int, op: "Op", v: dict[str, np.ndarray]) -> None:
        """Execute on node k in the executor's mode ("float" or "int8"); values in ``v``."""

    def message(self, ex: Any, k: int, op: "Op", v: dict[str, np.ndarray], batch: int) -> np.ndarray | None:
        """Communication ops: the message node k sends (None: nothing)."""
        return None

    def receive(self, ex: Any, k: int, op: "Op", v: dict[str, np.ndarray], messages: dict[int, np.ndarray],
                got: Callable[[int], np.ndarray], batch: int) -> None:
        """Communication ops: what node k makes of the messages; ``got(j)``: [batch] delivered."""

    def senders(self, op: "Op") -> list[int]:
        """Communication ops: the nodes whose messages this op takes."""
        return []

    # -- C ---------------------------------------------------------------------------------------
    def c_context(self, e: EmitContext, op: "Op") -> dict[str, Any]:
        """The template's values for this op (besides index/seq/kind/where/comment)."""
        return {}

    # -- footprint -------------------------------------------------------------------------------
    def const_bytes(self, op: "Op", tensors: dict[str, "Tensor"], cfg: "ModelConfig") -> int:
        """Bytes of the constants quantize() makes (each array rounded up to 4), from the
        structure alone (``cisl fit`` sizes models before they are quantised)."""
        return 0

    def stored_weights(self, op: "Op", cfg: "ModelConfig") -> int:
        """Float weights and biases of the model this op stores on its node."""
        return 0

    def table_bytes(self, op: "Op") -> int:
        """Bytes of generated descriptor tables for this op (not counting the op's code)."""
        return 0

    def shared_tables(self, op: "Op") -> list[tuple[object, int]]:
        """Tables the generated C stores once however many ops hold them: (content key, bytes)."""
        return []

    # -- timing ----------------------------------------------------------------------------------
    def work(self, op: "Op", shape: dict[str, tuple[int, ...]]) -> int:
        """Units of :attr:`work_unit` one execution does: the output's elements for "element"
        ops, m·k·n of :meth:`gemm_shape` for "MAC" ops, 0 for ops without a natural unit."""
        if self.work_unit == "element":
            return int(np.prod(shape[op.outs[0]]))
        if self.work_unit == "MAC":
            m, k, n = self.gemm_shape(op, shape)
            return m * k * n
        return 0

    def gemm_shape(self, op: "Op", shape: dict[str, tuple[int, ...]]) -> tuple[int, int, int]:
        """MAC ops: the (m, k, n) of the matrix product they compute."""
        raise NotImplementedError(f"{self.name} is not a matrix product")


def c_ident(name: str) -> str:
    """A C identifier stem of a tensor or somegather name (device suffix dropped)."""
    return re.sub(r"[^A-Za-z0-9]", "_", name.split("@")[0])


def align4(n: int) -> int:
    """n rounded up to a multiple of 4 (how constants and buffers are laid out)."""
    return (n + 3) // 4 * 4


def attr_fields(attrs_type: type) -> list[dataclasses.Field]:
    return list(dataclasses.fields(attrs_type))


def json_name(f: dataclasses.Field) -> str:
    return f.metadata.get("json", f.name)


# -- helpers of the shape rules -------------------------------------------------------------------

def fail(field_name: str, message: str):
    raise PlanShapeError(field_name, message)


def shape_of(tensors: dict, name: str, field_name: str, ndim: int | None = None) -> tuple[int, ...]:
    """The shape of a node tensor the op names (its rank checked when ``ndim`` is given)."""
    t = tensors.get(name)
    if t is None:
        fail(field_name, f"names tensor {name!r}, which the node does not have")
    if ndim is not None and len(t.shape) != ndim:
        fail(field_name, f"tensor {name} has shape {list(t.shape)}; this op needs {ndim} dimensions")
    return tuple(t.shape)


def expect_const(consts: dict, name: str, field_name: str, shape: tuple[int, ...], dtype: str) -> None:
    """The constant an op names exists with the shape and dtype its kernel reads."""
    c = consts.get(name)
    if c is None:
        fail(field_name, f"names constant {name!r}, which the node does not have")
    if tuple(c.shape) != tuple(shape) or str(c.dtype) != dtype:
        fail(field_name, f"constant {name} is {str(c.dtype)} {list(c.shape)}; the op's tensors need {dtype} "
                         f"{list(shape)}")


def expect_same(tensors: dict, a: str, b: str, field_name: str) -> tuple[int, ...]:
    sa, sb = shape_of(tensors, a, field_name), shape_of(tensors, b, field_name)
    if sa != sb:
        fail(field_name, f"tensors {a} {list(sa)} and {b} {list(sb)} must have the same shape")
    return sa


def expect_runs(runs, src_cols: int, dst_cols: int, field_name: str) -> None:
    """Column copy runs stay inside their source and destination."""
    for s, d, n in runs:
        if s < 0 or d < 0 or n < 1 or s + n > src_cols or d + n > dst_cols:
            fail(field_name, f"run [{s}, {d}, {n}] reaches outside {src_cols} source / {dst_cols} destination "
                             f"columns")
