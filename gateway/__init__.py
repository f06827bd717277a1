"""``kfed gateway``: a Kafka wire-protocol server, so unmodified Kafka clients produce to and consume from logical
topics (``README.md`` in this folder is the operator's guide).

The listener (``server``) calls one handler per API key, each bound to its job's context (``context``), never to
the gateway process (``app``: the follower, registration, heartbeats). Handlers: ``admin``, ``produce`` with
``strict`` (a strict topic's records placed by key), ``fetch``, ``groups`` and ``offsets``; below them
``routing``, ``producers``, ``members``, ``holdback`` and ``view``. The Kafka protocol itself is ``kafka_wire``.

Its errors (``metadata_log.errors``' tree; the wire layer's are drawn in ``kafka_wire``):

    KfedError
    ├── ProducerIdsExhausted       a gateway process minted all its producer ids: restart it
    └── InvalidSetting
        └── RegistrationRefused    the controllers refuse the gateway's token: give --token-file
"""
