"""The part's memory system on top of the core's zero-wait-state timing: flash wait states and
the instruction cache, from board.toml's ``[timing]`` section.

nRF52840 (Product Specification v1.x, NVMC): code runs from flash through the NVMC's instruction
cache (ICACHECNF.CACHEEN; IHIT/IMISS count its hits and misses). Data reads from flash (weights,
``const`` tables, literal pools) bypass that cache. Neither the flash's wait states at 64 MHz nor
the cache's geometry is stated in the specification, so both are carried as ranges:

* ``flash_wait`` — wait states of one flash access (low / central / high);
* data reads pay them at every change of flash line (``flash_line_bytes``: the flash's read width,
  a buffered line) at the central value, at no read at the low bound, and at every read at the high
  bound (no read buffer at all);
* instruction fetches pay them once per cache miss; the cache is simulated with
  ``icache_bytes`` / ``icache_ways`` / ``icache_line_bytes`` (LRU). At the low bound misses are free,
  at the high bound each costs the high wait states. ICACHECNF resets to CACHEEN = Disabled; the
  budgets assume the start-up code enables it (boards/nrf52840dk/startup.c), and the emulated SoC
  (nrf52840_soc.py) prices every fetch before that write as a miss (``ICache.enabled``).

``cisl report --calibrate`` fits ``flash_wait`` from DWT cycles measured on boards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..boards import Board
from ..errors import UserError


class ICache:
    """Set-associative instruction cache with LRU replacement (counts misses only)."""

    def __init__(self, size_bytes: int, ways: int, line_bytes: int):
        if size_bytes <= 0 or ways <= 0 or line_bytes <= 0 or size_bytes % (ways * line_bytes):
            raise ValueError(f"bad cache geometry {size_bytes} B, {ways} ways, {line_bytes} B lines")
        self.line_bits = line_bytes.bit_length() - 1
        self.sets = size_bytes // (ways * line_bytes)
        self.ways = ways
        self._sets: list[list[int]] = [[] for _ in range(self.sets)]
        self.misses = 0
        self.hits = 0
        # NVMC.ICACHECNF.CACHEEN. Off (the part's reset value; only the emulated SoC, which runs the
        # start-up code, switches it), every line fetched comes from the flash: priced as a miss,
        # neither counted in hits/misses (IHIT/IMISS count only while enabled) nor cached.
        self.enabled = True

    def lines(self) -> list[list[int]]:
        """Each set's lines, oldest first (the C hooks of native.py take the cache over; read only)."""
        return self._sets

    def set_lines(self, sets: list[list[int]], hits: int, misses: int) -> None:
        """Take ``sets`` (each set's lines, oldest first; kept, not copied) and the counts."""
        self._sets = sets
        self.hits, self.misses = hits, misses

    def fetch(self, address: int, size: int) -> int:
        """Fetch the lines of [address, address + size); returns the misses."""
        first = address >> self.line_bits
        last = (address + size - 1) >> self.line_bits
        if not self.enabled:
            return last - first + 1
        misses = 0
        for line in range(first, last + 1):
            s = self._sets[line % self.sets]
            if s and s[-1] == line:
                self.hits += 1
                continue
            if line in s:
                s.remove(line)
                self.hits += 1
            else:
                misses += 1
                if len(s) >= self.ways:
                    s.pop(0)
            s.append(line)
        self.misses += misses
        return misses


@dataclass
class MemoryModel:
    name: str
    flash_range: tuple[int, int]
    ram_range: tuple[int, int]
    flash_wait: tuple[float, float, float]
    flash_line_bytes: int
    icache: ICache | None
    source: str = ""
    last_flash_line: int = -1
    flash_line_bits: int = field(init=False)

    def __post_init__(self) -> None:
        self.flash_line_bits = self.flash_line_bytes.bit_length() - 1

    def penalties(self, flash_reads: int, line_changes: int, icache_misses: int) -> tuple[float, float, float]:
        lo, ce, hi = self.flash_wait
        return (lo * (line_changes + icache_misses),
                ce * (line_changes + icache_misses),
                hi * (flash_reads + icache_misses))

    @staticmethod
    def for_board(board: Board, flash_wait: tuple[float, float, float] | None = None,
                  flash_bytes: int | None = None) -> "MemoryModel":
        """The board's memory system; ``flash_bytes`` (benchmarks only) enlarges the flash to time an
        image linked for a part with more of it (same wait states and cache)."""
        facts = board.facts
        t = facts.get("timing")
        if t is None:
            raise UserError(f"board '{board.name}' has no [timing] section in its board.toml; the cycle model "
                            f"needs the part's flash wait states and instruction cache (see boards/nrf52840dk)")
        b = facts["board"]
        flash = (int(b.get("flash_origin", 0)), int(b.get("flash_origin", 0)) + int(flash_bytes or b["flash_bytes"]))
        ram = (int(b.get("ram_origin", 0x2000_0000)), int(b.get("ram_origin", 0x2000_0000)) + int(b["ram_bytes"]))
        w = t["flash_wait"]
        wait = flash_wait or (float(w["low"]), float(w["central"]), float(w["high"]))
        ic = t.get("icache")
        cache = ICache(int(ic["bytes"]), int(ic["ways"]), int(ic["line_bytes"])) if ic and ic.get("enabled", True) \
            else None
        return MemoryModel(board.name, flash, ram, wait, int(t.get("flash_line_bytes", 16)), cache,
                           str(t.get("source", "")))
