"""One controller node of the kfed quorum: a Raft replica (``metadata_quorum``) and the HTTP API (``http/``), with
the leader's soft state (leases, drains, groups, gateways, the transaction driver).

Its errors (``metadata_log.errors``' tree):

    InvalidSetting
    └── ConfigError                a quorum config file             (also ValueError)
    KfedError
    └── CompletionFailed           a participant of a transaction could not be completed yet
"""
