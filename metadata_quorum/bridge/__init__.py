"""The bridge: the one package of kfed that reaches into pysyncobj 0.3.17's internals.

pysyncobj is kfed's Raft engine. Here, and only here, kfed changes how it works:

- ``Replica``, the ``SyncObj``: one replicated method taking bytes (``LogState.apply_command``, which never
  raises); a follower's ``append_entries`` handled by Raft's rule (``rules.plan_append``); replies stamped with
  their term; a pre-vote before every election (``rules.PreVote``); a tick's own stalls not counted as the
  peers' silence (``rules.stall_excuse``); the Raft thread woken once per burst of proposals.
- ``install``: pysyncobj builds its journal and dump serializer, pickles and unpickles, compresses, and makes
  its TCP connections through module globals; ``install`` points them at kfed's (``journal.CheckedJournal``,
  ``DumpSerializer`` over ``dump.DumpWriter``, ``wire.SafePickle``, ``wire.WireZlib``, ``BoundedConnection``).
  Nothing changes at import: ``RaftNode`` calls ``install`` (idempotent) when it starts.
- ``BoundedConnection`` and ``GuardedTransport``: what a stranger on the Raft port can make the node hold is
  bounded before anything is authenticated (a frame's length, the connections that never say who they are);
  a Raft port that cannot be bound is said (pysyncobj retries in silence).
- ``sync_obj_conf``: pysyncobj's options (``RaftSettings.options``) and the node's hooks.

The modules: ``replica`` (the ``SyncObj``, ``install``, the dump serializer, the options) and ``connections``
(the Raft port's connections and transport).

Every private name of pysyncobj used here is in ``privates.PRIVATE_NAMES``; ``tests/unit/metadata_quorum/
test_raft_bridge.py`` pins each against the installed pysyncobj (it exists, with the signature given) and
checks that no module outside it names one: an upgrade of pysyncobj fails there, loudly, not in production.
"""

from pysyncobj.config import SERIALIZER_STATE

from .connections import (
    MAX_UNKNOWN_CONNECTIONS,
    SAFE_PICKLE,
    BoundedConnection,
    GuardedTransport,
)
from .replica import (
    DumpSerializer,
    NodeHooks,
    Replica,
    excuse_stall,
    failure,
    install,
    journal_of,
    leads,
    sync_obj_conf,
)

__all__ = [
    "MAX_UNKNOWN_CONNECTIONS",
    "SAFE_PICKLE",
    "SERIALIZER_STATE",
    "BoundedConnection",
    "DumpSerializer",
    "GuardedTransport",
    "NodeHooks",
    "Replica",
    "excuse_stall",
    "failure",
    "install",
    "journal_of",
    "leads",
    "sync_obj_conf",
]
