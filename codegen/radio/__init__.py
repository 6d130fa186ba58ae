"""Slot-level radio for the virtual testbed: topologies, the BLE channel model, Mixer timing, traces.

See docs/design/radio.md for the model, its parameters and its limits.
"""
