"""Board time and energy of a compiled plan: CPU cycles, radio time, energy (docs/design/timing.md)."""
