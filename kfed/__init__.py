"""The ``kfed`` command: the composition root of the distribution.

``kfed controller`` (a quorum node), ``kfed agent`` (a physical cluster's agent), the operator commands
``kfed cluster / topic / quorum`` (``ops``), ``kfed pipeline`` (the Spark jobs) and ``kfed local`` (the
embedded federation) are parsed here and handed to the package that does the work.

The package dependency rule (checked by tests/unit/test_package_deps.py): ``kfed`` may import every other
package and none imports it, so no library or server module depends on how it is started.
"""
