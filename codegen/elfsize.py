"""Flash and RAM of a linked image, read from its ELF section headers (what `size -A` shows).

A section counts toward flash if it is loaded (SHF_ALLOC, not NOBITS) — .data too, whose initial
image lives in flash — and toward RAM if its address lies in the RAM region or it is NOBITS
(.bss, the stack). Only 32-bit little-endian ELF (arm-none-eabi) is read, through pyelftools.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SHF_ALLOC = 0x2
STT_OBJECT, STT_FUNC = 1, 2
# Elf32_Sym, little-endian (every image cisl reads is arm-none-eabi's)
_ELF32_SYM = np.dtype([("name", "<u4"), ("value", "<u4"), ("size", "<u4"), ("info", "u1"), ("other", "u1"),
                       ("shndx", "<u2")])


@dataclass
class Section:
    name: str
    addr: int
    size: int
    loaded: bool  # has bytes in the image (not NOBITS)


@dataclass
class ElfSize:
    sections: list[Section]
    symbols: dict[str, int] = field(default_factory=dict)  # __cisl_* symbols of the linker script
    ram_origin: int = 0x20000000

    def _in_ram(self, s: Section) -> bool:
        return s.addr >= self.ram_origin

    @property
    def flash_by_section(self) -> dict[str, int]:
        return {s.name: s.size for s in self.sections if s.loaded and s.size}

    @property
    def ram_by_section(self) -> dict[str, int]:
        return {s.name: s.size for s in self.sections if (self._in_ram(s) or not s.loaded) and s.size}

    @property
    def flash(self) -> int:
        return sum(self.flash_by_section.values())

    @property
    def ram(self) -> int:
        return sum(self.ram_by_section.values())


def symbols(elf, kinds: tuple[int, ...] = (), prefix: bytes = b"") -> list[tuple[str, int, int, int]]:
    """(name, value, size, type) of the named symbols in ``elf``'s .symtab (a pyelftools ELFFile of a
    32-bit little-endian image), those of the given STT_* types only if any are given, and whose names
    start with ``prefix``. Read as one array: pyelftools parses a symbol at a time, ~0.1 ms each, which
    made reading the sizes and symbols of a 14-node build take 4 of its 16 s."""
    symtab = elf.get_section_by_name(".symtab")
    if symtab is None:
        return []
    table = np.frombuffer(symtab.data(), dtype=_ELF32_SYM)
    names = elf.get_section(symtab["sh_link"]).data()
    keep = table["name"] != 0
    if kinds:
        keep &= np.isin(table["info"] & 0xF, kinds)
    out = []
    for name, value, size, info in zip(*(table[keep][k].tolist() for k in ("name", "value", "size", "info"))):
        if names.startswith(prefix, name):
            out.append((names[name:names.index(b"\0", name)].decode("utf-8", "replace"), value, size, info & 0xF))
    return out


def read_elf_size(path: Path, ram_origin: int = 0x20000000) -> ElfSize:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        head = f.read(6)
        if head[:4] != b"\x7fELF" or head[4:5] != b"\x01" or head[5:6] != b"\x01":
            raise ValueError(f"{path}: not a 32-bit little-endian ELF file")
        f.seek(0)
        elf = ELFFile(f)
        sections = [Section(sec.name, sec["sh_addr"], sec["sh_size"], sec["sh_type"] != "SHT_NOBITS")
                    for sec in elf.iter_sections() if sec["sh_flags"] & SHF_ALLOC]
        linker = {name: value for name, value, _, _ in symbols(elf, prefix=b"__cisl_")}
    return ElfSize(sections, linker, ram_origin)


def image_id(path: Path) -> str | None:
    """The first 8 bytes of the image's GNU build id as hex (what nrf52840dk images print as the boot
    line's `image`), or None when it was linked without --build-id."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            section = ELFFile(f).get_section_by_name(".note.gnu.build-id")
            for note in section.iter_notes() if section is not None else ():
                if note["n_type"] == "NT_GNU_BUILD_ID":
                    return str(note["n_desc"])[:16]
    except (OSError, ELFError):
        return None
    return None
