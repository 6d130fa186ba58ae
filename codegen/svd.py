"""Read a CMSIS-SVD device description, and check a board's register header against it.

The nRF52840 board (boards/nrf52840dk) defines the registers it touches in its own header,
written from the product specification. This module parses the SVD file that the pyocd package
ships (``nrf52840.svd`` inside pyocd/debug/svd/svd_data.zip; nothing of it is copied into the
repository) and checks every base address, register offset, field position/width and enumerated
value of that header against it.

Header conventions (boards/nrf52840dk/nrf52840_regs.h)::

    #define NRF_BASE_<PERIPHERAL>            0x40001000u       peripheral instance (SVD name)
    #define NRF_REG_<LAYOUT>_<REGISTER>      0x504u            register offset
    #define NRF_REG_<LAYOUT>_<REGISTER>(n)   (0x540u + 4u * (n))   register array
    #define NRF_FLD_<LAYOUT>_<REGISTER>_<FIELD>   NRF_FIELD(pos, width)
    #define NRF_VAL_<LAYOUT>_<REGISTER>_<FIELD>_<VALUE>   4u    enumerated value

A *layout* is the register map a peripheral kind shares (TIMER for TIMER0..4); ``LAYOUTS`` says
which SVD peripheral describes it. Register names are the SVD's, with clusters flattened by ``_``
(UARTE ``TXD.PTR`` is ``TXD_PTR``, PPI ``CH[n].EEP`` is ``CH_EEP(n)``).
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree as ET

LAYOUTS = {"RADIO": "RADIO", "TIMER": "TIMER0", "UARTE": "UARTE0", "CLOCK": "CLOCK", "PPI": "PPI",
           "UICR": "UICR", "GPIO": "P0", "FICR": "FICR", "POWER": "POWER", "NVMC": "NVMC",
           "APPROTECT": "APPROTECT", "WDT": "WDT"}

# What the pyocd-shipped nrf52840.svd (2018, written before build code F0 / revision 3) does not
# describe, from the nRF52840 Product Specification v1.8+ ("APPROTECT - Access port protection"
# register pages, "UICR.APPROTECT"), docs/design/approtect.md. ``supplement`` adds only what the
# SVD lacks; where the SVD has a register, field or value, the SVD's word stands and the
# supplement's disagreement is reported, so a newer SVD checks these facts too.
#   peripheral: (base, {register: (offset, {field: (pos, width, {value name: value})})})
SUPPLEMENT = {
    "APPROTECT": (0x40000000, {
        "DISABLE": (0x558, {"DISABLE": (0, 8, {"SWDISABLE": 0x5A})}),
    }),
    "UICR": (0x10001000, {
        "APPROTECT": (0x208, {"PALL": (0, 8, {"HWDISABLED": 0x5A})}),
    }),
}


@dataclass
class SvdField:
    pos: int
    width: int
    values: dict[str, int] = field(default_factory=dict)  # enumerated values, names upper-cased


@dataclass
class SvdRegister:
    name: str  # flattened: cluster_register, without [%s]
    offset: int  # of element 0
    dim: int = 1
    increment: int = 0
    fields: dict[str, SvdField] = field(default_factory=dict)


@dataclass
class SvdPeripheral:
    name: str
    base: int
    registers: dict[str, SvdRegister] = field(default_factory=dict)


def _int(text: str | None, default: int = 0) -> int:
    if text is None:
        return default
    t = text.strip().lower()
    if t.startswith("#"):
        return int(t[1:].replace("x", "0"), 2)
    return int(t, 0)


def _fields(reg: ET.Element) -> dict[str, SvdField]:
    out = {}
    for f in reg.iter("field"):
        name = f.findtext("name").strip().upper()
        if f.findtext("bitOffset") is not None:
            pos, width = _int(f.findtext("bitOffset")), _int(f.findtext("bitWidth"), 1)
        elif f.findtext("lsb") is not None:
            pos = _int(f.findtext("lsb"))
            width = _int(f.findtext("msb")) - pos + 1
        else:
            m = re.match(r"\[(\d+):(\d+)\]", f.findtext("bitRange").strip())
            pos = int(m.group(2))
            width = int(m.group(1)) - pos + 1
        values = {}
        for e in f.iter("enumeratedValue"):
            if e.findtext("value") is not None:
                values[e.findtext("name").strip().upper()] = _int(e.findtext("value"))
        out[name] = SvdField(pos, width, values)
    return out


def _registers(parent: ET.Element, prefix: str, base_off: int, dim: int, inc: int) -> dict[str, SvdRegister]:
    out: dict[str, SvdRegister] = {}
    for el in parent:
        if el.tag not in ("register", "cluster"):
            continue
        name = el.findtext("name").strip().replace("[%s]", "").replace("%s", "")
        off = base_off + _int(el.findtext("addressOffset"))
        d = _int(el.findtext("dim"), 1)
        i = _int(el.findtext("dimIncrement"), 0)
        if dim > 1 and d > 1:
            raise ValueError(f"nested arrays at {prefix}{name} are not supported")
        d2, i2 = (d, i) if d > 1 else (dim, inc)
        if el.tag == "cluster":
            out.update(_registers(el, f"{prefix}{name}_", off, d2, i2))
        else:
            out[prefix + name] = SvdRegister(prefix + name, off, d2, i2, _fields(el))
    return out


def parse_svd(text: bytes | str) -> dict[str, SvdPeripheral]:
    root = ET.parse(io.BytesIO(text.encode() if isinstance(text, str) else text)).getroot()
    raw = {p.findtext("name").strip(): p for p in root.iter("peripheral")}
    out: dict[str, SvdPeripheral] = {}
    for name, p in raw.items():
        src = p
        while src.find("registers") is None and src.get("derivedFrom"):
            src = raw[src.get("derivedFrom")]
        regs = _registers(src.find("registers"), "", 0, 1, 0) if src.find("registers") is not None else {}
        out[name] = SvdPeripheral(name, _int(p.findtext("baseAddress")), regs)
    return out


def supplement(svd: dict[str, SvdPeripheral], extra: dict | None = None) -> list[str]:
    """Add the ``SUPPLEMENT`` facts the SVD lacks (in place); returns the disagreements with
    what the SVD already has (empty when they agree)."""
    problems = []
    for pname, (base, regs) in (SUPPLEMENT if extra is None else extra).items():
        p = svd.setdefault(pname, SvdPeripheral(pname, base))
        if p.base != base:
            problems.append(f"supplement {pname}: base {base:#x}, SVD says {p.base:#x}")
        for rname, (off, fields) in regs.items():
            r = p.registers.setdefault(rname, SvdRegister(rname, off))
            if r.offset != off:
                problems.append(f"supplement {pname}.{rname}: offset {off:#x}, SVD says {r.offset:#x}")
            for fname, (pos, width, values) in fields.items():
                f = r.fields.setdefault(fname, SvdField(pos, width))
                if (f.pos, f.width) != (pos, width):
                    problems.append(f"supplement {pname}.{rname}.{fname}: ({pos}, {width}), SVD says "
                                    f"({f.pos}, {f.width})")
                for vname, v in values.items():
                    if f.values.setdefault(vname, v) != v:
                        problems.append(f"supplement {pname}.{rname}.{fname}.{vname}: {v:#x}, SVD says "
                                        f"{f.values[vname]:#x}")
    return problems


def pyocd_svd_text(device: str = "nrf52840") -> bytes:
    """The SVD file shipped inside the installed pyocd package (read in place, never copied)."""
    import pyocd.debug.svd as svdpkg  # the project depends on pyocd (flashing); imported only here

    with zipfile.ZipFile(Path(svdpkg.__file__).parent / "svd_data.zip") as z:
        return z.read(f"{device}.svd")


# ---------------------------------------------------------------------------------- header check

_DEFINE = re.compile(r"^\s*#\s*define\s+(NRF_(?:BASE|REG|FLD|VAL)_\w+)(\((\w+)\))?\s+(.+?)\s*(?:/\*.*)?$")


def _c_eval(expr: str, arg: str | None = None, value: int = 0) -> int:
    e = re.sub(r"\b(0x[0-9A-Fa-f]+|\d+)[uUlL]+\b", r"\1", expr)
    e = e.replace("(uint32_t)", "")
    m = re.fullmatch(r"\s*NRF_FIELD\(\s*(\d+)\s*,\s*(\d+)\s*\)\s*", e)
    if m:
        return (int(m.group(1)), int(m.group(2)))  # type: ignore[return-value]
    if arg:
        e = re.sub(rf"\b{arg}\b", str(value), e)
    if not re.fullmatch(r"[\s0-9a-fA-FxX+*()<>|&-]+", e):
        raise ValueError(f"cannot evaluate {expr!r}")
    return int(eval(e, {"__builtins__": {}}))  # noqa: S307 - digits and operators only, checked above


@dataclass
class HeaderCheck:
    checked: list[str]
    problems: list[str]


def check_header(header: str, svd: dict[str, SvdPeripheral]) -> HeaderCheck:
    """Check every NRF_BASE/REG/FLD/VAL macro of ``header`` against ``svd``."""
    checked, problems = [], []
    layouts = {k: svd[v] for k, v in LAYOUTS.items() if v in svd}
    for line in header.splitlines():
        m = _DEFINE.match(line)
        if not m:
            continue
        macro, arg, body = m.group(1), m.group(3), m.group(4)
        kind, rest = macro.split("_", 2)[1], macro.split("_", 2)[2]
        checked.append(macro)
        try:
            if kind == "BASE":
                p = svd.get(rest)
                if p is None:
                    problems.append(f"{macro}: no peripheral {rest} in the SVD")
                elif _c_eval(body) != p.base:
                    problems.append(f"{macro} = {_c_eval(body):#x}, SVD says {p.base:#x}")
                continue
            layout_name, _, tail = rest.partition("_")
            p = layouts.get(layout_name)
            if p is None:
                problems.append(f"{macro}: unknown layout {layout_name} (known: {', '.join(LAYOUTS)})")
                continue
            if kind == "REG":
                r = p.registers.get(tail)
                if r is None:
                    problems.append(f"{macro}: {p.name} has no register {tail}")
                    continue
                if arg:
                    got0, got1 = _c_eval(body, arg, 0), _c_eval(body, arg, 1)
                    if r.dim < 2 or got0 != r.offset or got1 - got0 != r.increment:
                        problems.append(f"{macro}: offset {got0:#x} step {got1 - got0:#x}, SVD says {r.offset:#x} "
                                        f"step {r.increment:#x} (dim {r.dim})")
                elif r.dim > 1:
                    problems.append(f"{macro}: {tail} is an array of {r.dim} in the SVD; define it as {macro}(n)")
                elif _c_eval(body) != r.offset:
                    problems.append(f"{macro} = {_c_eval(body):#x}, SVD says {r.offset:#x}")
                continue
            # FLD / VAL: find the split REGISTER_FIELD[_VALUE] that the SVD knows
            found = False
            parts = tail.split("_")
            for i in range(1, len(parts)):
                reg = "_".join(parts[:i])
                r = p.registers.get(reg)
                if r is None:
                    continue
                for j in range(i + 1, len(parts) + 1):
                    fname = "_".join(parts[i:j])
                    f = r.fields.get(fname)
                    if f is None:
                        continue
                    if kind == "FLD" and j == len(parts):
                        found = True
                        got = _c_eval(body)
                        if tuple(got) != (f.pos, f.width):
                            problems.append(f"{macro} = (pos {got[0]}, width {got[1]}), SVD says (pos {f.pos}, "
                                            f"width {f.width})")
                    elif kind == "VAL" and j < len(parts):
                        vname = "_".join(parts[j:])
                        if vname in f.values:
                            found = True
                            if _c_eval(body) != f.values[vname]:
                                problems.append(f"{macro} = {_c_eval(body)}, SVD says {f.values[vname]}")
                    if found:
                        break
                if found:
                    break
            if not found:
                problems.append(f"{macro}: no such {'field' if kind == 'FLD' else 'enumerated value'} in {p.name}")
        except ValueError as e:
            problems.append(f"{macro}: {e}")
    return HeaderCheck(checked, problems)
