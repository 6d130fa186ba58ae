"""Heterogeneous planning (issue 17): node profiles, uneven splits and the mixed-integer planner.

* :mod:`.split`    — an uneven split (heads and hidden units per node) and the split file;
* :mod:`.profile`  — what each node can do: cycles per unit of work per op class, free memory,
  currents, energy budget (`cisl profile`);
* :mod:`.costs`    — the exact evaluation of one split (footprints, cycles, Mixer rounds, energy);
* :mod:`.problem`  — the planning problem: per-node option tables and the linear radio model;
* :mod:`.solve`    — the MILP (scipy.optimize.milp / HiGHS), brute force, and the baselines
  (even split, speed-proportional, CoEdge's relaxation with recursive elimination);
* :mod:`.plan`     — `cisl plan`: solve, re-check exactly, explain infeasibility, write the split.

docs/design/heterogeneous.md has the formulation.
"""
