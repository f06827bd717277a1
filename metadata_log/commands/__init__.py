"""Pure commands: validate a request against an image and return the records that carry it out.

A command never mutates anything; the controller proposes ``Result.records`` and replies with
``Result.reply`` once they are committed. Validation here gives the caller a precise 4xx that names the
field; ``apply`` re-checks every record at commit time, so two writers validated against the same image
cannot both win. Every limit is a named constant with its reason.

One module per feature, each with the same shape: ``clusters``, ``topics``, ``groups``, ``gateways``, ``key_order``
(strict key order's epochs, seals and releases) and ``transactions`` (the coordinator of transactions across
sub-clusters); ``common`` holds ``Result`` and the checks they share. A feature's state and replay are its part
of the image (``metadata_log.image``), its JSON views are ``metadata_log.views``.
"""

from .clusters import (
    LeaderRanges,
    PhysicalPartition,
    change_cluster_state,
    check_can_retire,
    decommission_cluster,
    decommissioned,
    fence_cluster,
    leader_ranges,
    placement_clusters,
    register_cluster,
    report_leader_ranges,
    report_physical_partitions,
    unfence_cluster,
)
from .common import (
    MAX_NAME_CHARS,
    MAX_PARTITIONS_PER_REQUEST,
    MAX_PARTITIONS_PER_TOPIC,
    Result,
    check_bootstrap,
    check_name,
)
from .gateways import MAX_INSTANCE_CHARS, expire_gateway, register_gateway
from .groups import claim_group, group_assignment, heartbeat_releases, start_generation
from .key_order import (
    change_key_order,
    check_key_order,
    drained_partitions,
    give_up,
    plan_epoch,
    plan_epochs,
    record_seals,
    release_parents,
    routable_partitions,
    seals_to_measure,
    unreadable_partitions,
    with_epochs,
)
from .topics import (
    add_partitions,
    change_partition_state,
    create_topic,
    delete_topic,
    shrink_partitions,
)
from .transactions import (
    DEFAULT_COMPLETION_GRACE_MS,
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    MAX_PARTITIONS_PER_TRANSACTION,
    MAX_TRANSACTION_TIMEOUT_MS,
    add_to_transaction,
    check_transactional_id,
    complete_participants,
    end_transaction,
    expire_transactions,
    init_transactions,
    txn_refusal,
)

__all__ = [
    "DEFAULT_COMPLETION_GRACE_MS",
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "MAX_INSTANCE_CHARS",
    "MAX_NAME_CHARS",
    "MAX_PARTITIONS_PER_REQUEST",
    "MAX_PARTITIONS_PER_TOPIC",
    "MAX_PARTITIONS_PER_TRANSACTION",
    "MAX_TRANSACTION_TIMEOUT_MS",
    "LeaderRanges",
    "PhysicalPartition",
    "Result",
    "add_partitions",
    "add_to_transaction",
    "change_cluster_state",
    "change_key_order",
    "change_partition_state",
    "check_bootstrap",
    "check_can_retire",
    "check_key_order",
    "check_name",
    "check_transactional_id",
    "claim_group",
    "complete_participants",
    "create_topic",
    "decommission_cluster",
    "decommissioned",
    "delete_topic",
    "drained_partitions",
    "end_transaction",
    "expire_gateway",
    "expire_transactions",
    "fence_cluster",
    "give_up",
    "group_assignment",
    "heartbeat_releases",
    "init_transactions",
    "leader_ranges",
    "placement_clusters",
    "plan_epoch",
    "plan_epochs",
    "record_seals",
    "register_cluster",
    "register_gateway",
    "release_parents",
    "report_leader_ranges",
    "report_physical_partitions",
    "routable_partitions",
    "seals_to_measure",
    "shrink_partitions",
    "start_generation",
    "txn_refusal",
    "unfence_cluster",
    "unreadable_partitions",
    "with_epochs",
]
