"""The client library of the metadata log: what every process outside the quorum uses to follow it.

- ``retry``: the one retry policy of every call to the controllers, without I/O (failover over the bootstrap
  list, back-off, ``Retry-After``, the deadline, one idempotency key per write, the error to raise);
- ``client``: ``ControllerClient`` and ``AsyncControllerClient``, the sync and async transports that drive it;
- ``follower``: ``LogFollower``, which tails the log by offset and keeps a local image;
- ``access``: the credentials a client presents;
- ``brokers``: facts about a sub-cluster's broker kind (Apache Kafka, Tansu), read from its ApiVersions;
- ``holdback``: a consumer's rule of strict key order, which records a group member may hand out now;
- ``arguments``: the argparse types every kfed command line shares.

The SDK, the agents, Spark jobs and the gateway build on it; it imports only the pure core, ``metadata_log``.
Its errors (``metadata_log.errors``' tree):

    InvalidSetting
    └── AccessError                a token, secret or CA file       (also ValueError)
    Unavailable
    └── FollowerError              no controller answered with the log
"""
