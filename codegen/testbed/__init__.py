"""Testbed host tools: the testbed file, flashing, serial log capture and reports.

The same commands drive real nRF52840 boards (debug probes chosen by serial number, UARTs read with
pyserial) and the virtual testbed (runner ``sim``, codegen/vtestbed/: a background supervisor gives every
node process a pseudo-terminal as its serial port). See docs/usage.md (`cisl testbed`, `cisl flash`, `cisl logs`,
`cisl report`).
"""
