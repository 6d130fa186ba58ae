"""Flash and RAM of a linked image, read from its ELF section headers (what `size -A` shows).

A section counts toward flash if it is loaded (SHF_ALLOC, not NOBITS) — .data too, whose initial
image lives in flash — and toward RAM if its address lies in the RAM region or it is NOBITS
(.bss, the stack). Only 32-bit little-endian ELF (arm-none-eabi) is read, through pyelftools.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

SHF_ALLOC = 0x2


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
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    with open(path, "rb") as f:
        head = f.read(6)
        if head[:4] != b"\x7fELF" or head[4:5] != b"\x01" or head[5:6] != b"\x01":
            raise ValueError(f"{path}: not a 32-bit little-endian ELF file")
        f.seek(0)
        elf = ELFFile(f)
        sections = []
        symbols: dict[str, int] = {}
        for sec in elf.iter_sections():
            if sec["sh_type"] == "SHT_SYMTAB" and isinstance(sec, SymbolTableSection):
                for sym in sec.iter_symbols():
                    if sym.name.startswith("__cisl_"):
                        symbols[sym.name] = sym["st_value"]
            if sec["sh_flags"] & SHF_ALLOC:
                sections.append(Section(sec.name, sec["sh_addr"], sec["sh_size"], sec["sh_type"] != "SHT_NOBITS"))
    return ElfSize(sections, symbols, ram_origin)


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
