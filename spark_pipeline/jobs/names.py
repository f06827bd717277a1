"""The names of the warehouse jobs, one module each in this package."""

JOBS = ("ods_ingest", "dwd_clean", "dws_aggregate", "audit", "demo", "check")
