"""Slot-level radio for the virtual testbed: topologies, the BLE channel model, Mixer timing, traces.

See docs/design/radio.md for the model, its parameters and its limits.
"""

from .channel import Channel
from .physics import ChannelParams, GilbertElliott, path_loss_db, prr
from .airtime import air_time_us, packet_length, round_slots, round_us, slot_us, slot_us_approx
from .topology import (LINK_THRESHOLD, REF_LENGTH, Topology, hop_diameter, hop_distances, is_connected,
                       link_graph, link_quality, topology)
from .trace import DEAD, HEARD_NOTHING, IDLE, TX, Trace, TraceRecorder

__all__ = [
    "Channel", "ChannelParams", "GilbertElliott", "path_loss_db", "prr",
    "air_time_us", "packet_length", "round_slots", "round_us", "slot_us", "slot_us_approx",
    "LINK_THRESHOLD", "REF_LENGTH", "Topology", "hop_diameter", "hop_distances", "is_connected",
    "link_graph", "link_quality", "topology",
    "DEAD", "HEARD_NOTHING", "IDLE", "TX", "Trace", "TraceRecorder",
]
