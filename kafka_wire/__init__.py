"""The Kafka wire layer: what kfed needs to speak Kafka's protocol, to clients and to brokers alike.

- ``protocol``: request and response envelopes from ``kio`` (generated from Kafka's own JSON schemas), framing,
  and the consumer group protocol's embedded messages;
- ``entities``: ``build`` (a message of any version from plain values) and ``ProtocolError``;
- ``writer``: compiled kio writers, the fast path of ``protocol``;
- ``protocol``, ``entities`` and ``writer`` are the only modules of kfed that import ``kio``;
- ``batches``: record batches (v2): the walk over a request's or a fetch's batches, and a strict topic's
  regrouping of records by key (in C in ``_records.c``);
- ``upstream``: connections to a sub-cluster's brokers (``BrokerConnection``, ``ClusterClient``), as a client.

The gateway serves Kafka clients with it and the controller's transaction driver talks to brokers with it; it
imports nothing of theirs. Its errors (``metadata_log.errors``' tree):

    CorruptData
    └── ProtocolError              a Kafka frame that does not decode (also ValueError)
        └── BadBatch               a record batch a strict topic's records cannot be read from
    InvalidRequest
    └── UnsupportedCompression     a strict topic's batch in a codec that is not read
    Unavailable
    ├── UpstreamError              a broker behind the connection
    └── NoPartitionNow             a strict topic's record whose partition takes no writes now
"""
