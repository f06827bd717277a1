"""The immutable metadata image and the one pure function that makes the next one (Kafka's ``metadata/image``).

- ``MetadataImage`` (``metadata.py``): everything the log says as of one offset, made of the parts below;
  ``EMPTY_IMAGE`` is the image of the empty log.
- One module per part, each with its image values and its delta: ``cluster.py`` (``ClusterImage``,
  ``ClusterDelta``), ``topics.py`` (``TopicImage``, ``PartitionImage``, ``TopicsDelta``), ``groups.py``,
  ``quorum.py`` (voters and the metadata version).
- ``MetadataDelta`` (``delta.py``) dispatches each record to the part it changes; ``apply(image, records)``
  replays a batch and freezes it into the next image. No clock, no randomness, no I/O.

The image written as records, and read back, is ``metadata_log.snapshot``.
"""

from .cluster import CLUSTER_TRANSITIONS, ClusterDelta, ClusterImage
from .common import InvalidRecord
from .delta import BULK_TYPES, MetadataDelta, apply, apply_runs
from .groups import GroupImage, GroupsDelta
from .metadata import EMPTY_IMAGE, MetadataImage, is_writable
from .quorum import QuorumDelta, VoterImage
from .topics import PARTITION_TRANSITIONS, PartitionImage, TopicImage, TopicsDelta, new_partitions

__all__ = [
    "BULK_TYPES",
    "CLUSTER_TRANSITIONS",
    "EMPTY_IMAGE",
    "PARTITION_TRANSITIONS",
    "ClusterDelta",
    "ClusterImage",
    "GroupImage",
    "GroupsDelta",
    "InvalidRecord",
    "MetadataDelta",
    "MetadataImage",
    "PartitionImage",
    "QuorumDelta",
    "TopicImage",
    "TopicsDelta",
    "VoterImage",
    "apply",
    "apply_runs",
    "is_writable",
    "new_partitions",
]
