"""The federated SDK: produce to and consume from logical topics, straight to the physical clusters."""

from .consumer import FederatedConsumer
from .errors import FederationError, NoWritablePartition, PartitionNotWritable, UnknownTopic
from .messages import FederatedMessage, Placement
from .producer import FederatedProducer

__all__ = [
    "FederatedConsumer",
    "FederatedMessage",
    "FederatedProducer",
    "FederationError",
    "NoWritablePartition",
    "PartitionNotWritable",
    "Placement",
    "UnknownTopic",
]
