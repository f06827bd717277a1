"""The federated SDK: produce to and consume from logical topics, straight to the physical clusters.

Its errors (``metadata_log.errors``' tree; ``FederationError`` is the base of what ``produce`` raises):

    KfedError
    ├── FederationError
    │   ├── UnknownTopic                              (also NotFound)
    │   └── PartitionNotWritable, NoWritablePartition (also Conflict)
    └── _LayoutNotFound            a probe's miss; never leaves ``messages``
    Unavailable
    └── BrokerUnknown              a broker whose kind could not be learnt
"""

from metadata_log.image import PartitionLocation

from .consumer import FederatedConsumer
from .errors import FederationError, NoWritablePartition, PartitionNotWritable, UnknownTopic
from .messages import FederatedMessage
from .producer import FederatedProducer

__all__ = [
    "FederatedConsumer",
    "FederatedMessage",
    "FederatedProducer",
    "FederationError",
    "NoWritablePartition",
    "PartitionLocation",
    "PartitionNotWritable",
    "UnknownTopic",
]
