"""One controller node of the kfed quorum: Raft replica + HTTP API."""
