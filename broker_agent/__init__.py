"""The agent of one physical cluster (``kfed agent``): registers it, heartbeats, reports its leaders and health,
and reconciles the cluster to the log (``reconcile`` plans, ``kafka`` acts: the one module that talks to the
brokers).

Its errors (``metadata_log.errors``' tree):

    Unavailable
    └── ClusterUnreachable         the cluster's brokers do not answer
    Conflict
    └── CannotGrow                 a broker without CreatePartitions
"""
