"""Flash and RAM of a linked image, read from its ELF section headers (what `size -A` shows).

A section counts toward flash if it is loaded (SHF_ALLOC, not NOBITS) — .data too, whose initial
image lives in flash — and toward RAM if its address lies in the RAM region or it is NOBITS
(.bss, the stack). Only 32-bit little-endian ELF (arm-none-eabi) is read; no external tools.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

SHF_ALLOC = 0x2
SHT_NOBITS = 8
SHT_SYMTAB = 2


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


def read_elf_size(path: Path, ram_origin: int = 0x20000000) -> ElfSize:
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 1 or data[5] != 1:
        raise ValueError(f"{path}: not a 32-bit little-endian ELF file")
    shoff, = struct.unpack_from("<I", data, 0x20)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x2E)
    heads = [struct.unpack_from("<IIIIIIIIII", data, shoff + i * shentsize) for i in range(shnum)]
    strtab_off = heads[shstrndx][4]

    def cstr(off: int) -> str:
        end = data.index(b"\0", off)
        return data[off:end].decode()

    sections = []
    symbols: dict[str, int] = {}
    for name, typ, flags, addr, off, size, link, _info, _align, entsize in heads:
        if typ == SHT_SYMTAB:
            str_off = heads[link][4]
            for k in range(size // entsize):
                st_name, st_value = struct.unpack_from("<II", data, off + k * entsize)
                if st_name:
                    sym = cstr(str_off + st_name)
                    if sym.startswith("__cisl_"):
                        symbols[sym] = st_value
        if flags & SHF_ALLOC:
            sections.append(Section(cstr(strtab_off + name), addr, size, typ != SHT_NOBITS))
    return ElfSize(sections, symbols, ram_origin)
