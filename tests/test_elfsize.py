"""Flash and RAM of a linked image (codegen/elfsize.py, read with pyelftools) against binutils' `size -A`."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from codegen.elfsize import STT_FUNC, STT_OBJECT, read_elf_size, symbols

SOURCE = """
int counter = 3;                 /* .data: flash (its initial image) and RAM */
char buf[100];                   /* .bss: RAM only */
const int table[4] = {1, 2, 3, 4};  /* .rodata: flash only */
int _start(void) { buf[0] = (char)table[counter]; return buf[0]; }
"""


@pytest.mark.unit
def test_not_an_elf_file_is_a_value_error(tmp_path):
    (tmp_path / "x.elf").write_bytes(b"MZ\x90\x00 not an ELF image")
    with pytest.raises(ValueError, match="not a 32-bit little-endian ELF file"):
        read_elf_size(tmp_path / "x.elf")


@pytest.mark.arm
@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None, reason="no arm-none-eabi-gcc")
def test_sizes_and_symbols_agree_with_binutils(tmp_path):
    (tmp_path / "t.c").write_text(SOURCE)
    elf = tmp_path / "t.elf"
    subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-nostdlib", "-Wl,-Ttext=0x0",
                    "-Wl,-Tdata=0x20000000", "-Wl,--defsym=__cisl_probe=0x1234", "-Wl,--defsym=other=0x99",
                    str(tmp_path / "t.c"), "-o", str(elf)], check=True, capture_output=True)
    listed = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], check=True, capture_output=True,
                            text=True).stdout.splitlines()
    size_a = {ln.split()[0]: (int(ln.split()[1]), int(ln.split()[2])) for ln in listed[2:]
              if ln.strip() and not ln.startswith("Total")}
    e = read_elf_size(elf)
    assert e.symbols == {"__cisl_probe": 0x1234}
    allocated = {s.name: (s.size, s.addr) for s in e.sections}
    assert allocated == {k: v for k, v in size_a.items() if k not in (".comment", ".ARM.attributes")}
    assert e.flash_by_section == {".text": size_a[".text"][0], ".data": 4, ".rodata": 16}
    assert e.ram_by_section == {".data": 4, ".bss": 100}
    assert (e.flash, e.ram) == (size_a[".text"][0] + 20, 104)
    # the symbol table, read as one array (the cycle model's names), as binutils lists it
    listed = subprocess.run(["arm-none-eabi-readelf", "-sW", str(elf)], check=True, capture_output=True,
                            text=True).stdout.splitlines()
    rows = [ln.split() for ln in listed if ln.strip()[:1].isdigit() and len(ln.split()) == 8]
    kinds = {"FUNC": STT_FUNC, "OBJECT": STT_OBJECT}
    want = sorted((r[7], int(r[1], 16), int(r[2]), kinds[r[3]]) for r in rows if r[3] in kinds)
    from elftools.elf.elffile import ELFFile

    with open(elf, "rb") as f:
        got = sorted(symbols(ELFFile(f), kinds=(STT_FUNC, STT_OBJECT)))
    assert got == want and {name for name, *_ in got} >= {"_start", "counter", "buf", "table"}, (got, want)
