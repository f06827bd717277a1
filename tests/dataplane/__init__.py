"""The data plane's Jepsen-style checks: a history of every send, acknowledgement, read and commit, and the
checker of what Kafka's contract and kfed's promises allow in it (``checker.py``)."""
