"""kfed benchmark harness: ``python -m bench`` (or ``make bench``); ``python -m bench --help`` for options.

Every benchmark starts real ``kfed controller`` processes on loopback (``deploy.launcher.LocalQuorum``) or,
for the Raft-layer comparison, bare Raft voters, and reports what it measured next to the baseline from
the same run and the goal from the issue. Machine-readable results go to ``bench/results/``.
"""
