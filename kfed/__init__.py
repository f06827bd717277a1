"""The ``kfed`` command: the composition root of the distribution.

``cli`` holds one table of command groups and dispatches to them. Each group is a module with
``add_arguments(parser)`` and ``run(args)``: ``controller`` (a quorum node), ``agent`` (a physical cluster's
agent), the operator commands ``cluster``, ``topic`` and ``quorum`` (over the HTTP API; what they share is in
``ops``), ``pipeline`` (the Spark jobs), ``local`` (the embedded federation) and ``gateway.cli`` (the Kafka
gateway). Each hands the work to the package that does it.

The package dependency rule (checked by tests/unit/test_package_deps.py): ``kfed`` may import every other
package and none imports it, so no library or server module depends on how it is started.
"""
