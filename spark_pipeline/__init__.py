"""kfed on Spark: the ``kfed`` Python Data Source and the warehouse jobs (ODS -> DWD -> DWS, audit).

Importing this package does not import pyspark (the ``kfed`` CLI imports ``spark_pipeline.jobs``):
``register`` and ``local_session`` import it when called.

Its errors (``metadata_log.errors``' tree):

    Gone
    └── DataLossError              records a query should read are gone
    Unavailable
    └── ClusterUnavailable, MetadataUnavailable
    InvalidSetting
    └── SourceOptionError          a ``kfed`` source option          (also ValueError)
"""

from .session import ARROW_SPEED_ENV, local_session, register, ship_code

__all__ = ["ARROW_SPEED_ENV", "local_session", "register", "ship_code"]
