"""The warehouse jobs, each runnable as ``python -m spark_pipeline.jobs.NAME`` or ``kfed pipeline NAME``.

``ods_ingest`` (topic -> ODS Parquet, incremental), ``dwd_clean`` (ODS -> DWD), ``dws_aggregate``
(DWD -> DWS) and ``audit`` (audit topic vs what arrived). ``demo`` produces demo events and runs them all;
``check`` says whether a cluster's executors can run the ``kfed`` source.
"""

from .names import JOBS

__all__ = ["JOBS"]
