"""The immutable metadata image and the one pure function that makes the next one (Kafka's ``metadata/image``).

- ``MetadataImage`` (``metadata.py``): everything the log says as of one offset, made of the parts below;
  ``EMPTY_IMAGE`` is the image of the empty log.
- One module per part, each with its image values and its delta: ``cluster.py`` (``ClusterImage``,
  ``ClusterDelta``), ``topics.py`` (``TopicImage``, ``TopicsDelta``), ``groups.py``,
  ``quorum.py`` (voters and the metadata version), ``gateways.py`` (``kfed gateway`` instances).
- ``partitions.py``: a topic's partitions (``Partitions`` of ``PartitionImage``) and a cluster's leaders
  (``Leaders``) in compact form, and the builders a delta changes.
- ``MetadataDelta`` (``delta.py``) dispatches each record to the part it changes; ``apply(image, records)``
  replays a batch and freezes it into the next image. No clock, no randomness, no I/O.

The image written as records, and read back, is ``metadata_log.snapshot``.
"""

from .changes import NO_CHANGES, MetadataChanges, Touched, changes_between
from .cluster import CLUSTER_TRANSITIONS, ClusterDelta, ClusterImage
from .common import InvalidRecord
from .delta import BULK_TYPES, MetadataDelta, apply, apply_runs, apply_touched
from .gateways import GatewayImage, GatewaysDelta
from .groups import GroupImage, GroupsDelta
from .metadata import EMPTY_IMAGE, MetadataImage, is_writable
from .partitions import Leaders, PartitionImage, Partitions
from .quorum import QuorumDelta, VoterImage
from .topics import PARTITION_TRANSITIONS, PartitionLocation, TopicImage, TopicsDelta

__all__ = [
    "BULK_TYPES",
    "CLUSTER_TRANSITIONS",
    "EMPTY_IMAGE",
    "NO_CHANGES",
    "PARTITION_TRANSITIONS",
    "ClusterDelta",
    "ClusterImage",
    "GatewayImage",
    "GatewaysDelta",
    "GroupImage",
    "GroupsDelta",
    "InvalidRecord",
    "Leaders",
    "MetadataChanges",
    "MetadataDelta",
    "MetadataImage",
    "PartitionImage",
    "PartitionLocation",
    "Partitions",
    "QuorumDelta",
    "TopicImage",
    "TopicsDelta",
    "Touched",
    "VoterImage",
    "apply",
    "apply_runs",
    "apply_touched",
    "changes_between",
    "is_writable",
]
