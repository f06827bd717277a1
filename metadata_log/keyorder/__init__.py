"""Per-key order across resizes for ``key_order: strict`` topics (issue 27); the design is ``docs/KEY_ORDER.md``.

- ``routing``: the hash space, the epoch's ``KeyMap`` and how the next one is made (minimal movement);
- ``history``: a topic's epochs, seal points and each group's releases (``KeyOrderTopic``);
- ``holdback``: the consumer's rule, which records a group member may hand out now.

Pure: no clock, no I/O; the SDK, the controller and the agents do the I/O around it.
"""
