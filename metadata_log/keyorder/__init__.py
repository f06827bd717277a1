"""Per-key order across resizes for ``key_order: strict`` topics; the design is ``docs/KEY_ORDER.md``.

- ``routing``: the hash space, the epoch's ``KeyMap``, how the next one is made (fewest keys moved), and the
  epoch header producers stamp;
- ``history``: a topic's epochs, seal points and each group's releases (``KeyOrderTopic``), and the
  coordinator's rules (what is releasable, what may be given up, what a member may act on);
- ``holdback``: the consumer's rule, which records a group member may hand out now;
- ``replay``: the key-order part of the image, rebuilt from its records and written back as records;
- ``commands``: the pure commands that validate requests and return those records.

Pure: no clock, no I/O; the SDK, the controller and the agents do the I/O around it.
"""
