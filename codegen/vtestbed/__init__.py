"""The virtual testbed: node processes (board ``sim`` on the host, or ``qemu-m4`` under QEMU) and a
medium that carries their messages, on one host.

* ``medium``: the process that carries messages (message mode: per-round loss patterns; radio
  mode: Mixer slot by slot over a codegen/radio channel) and writes the carried log;
* ``frames``: the frames between node processes and the medium;
* ``run``: one checked run of a build (`cisl sim`): every node once, compared bit for bit with the
  int8 reference;
* ``bed`` and ``supervisor``: the long-lived virtual testbed behind `cisl flash` / `cisl logs`
  (testbed runner ``sim``), each node's serial port a pseudo-terminal.

What every testbed shares (the testbed file, flashing, log capture, reports) is codegen/testbed/.
"""
