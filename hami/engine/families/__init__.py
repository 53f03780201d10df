"""Accelerator families behind one seam.

Each family HAMi v2.10 schedules (its `pkg/device/<vendor>`) is one module here that
declares what HAMi's family declares: resource names, the node registration its device
plugin writes, how a container's request is read, how cards are fitted and scored, and
the annotations a bind writes for that plugin. `registry` is the only place that lists
them; nothing outside a family's module and the registry names a family.
"""
