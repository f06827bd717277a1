"""The HTTP API of a controller node: one router per resource over the service layer.

``app.py`` builds the app; ``log``, ``metadata``, ``clusters``, ``topics``, ``operations``, ``agents``,
``groups`` and ``quorum`` hold the ``/v1`` routes, ``health`` the probes and metrics. Routes parse,
delegate to ``controller/service.py`` and encode (``encoding.py``); what they need comes through
``deps.py``. Leader-only routes are declared once (``routing.py``) and the hot path (``hotpath.py``)
derives its table from them. Request bodies are in ``bodies.py``.
"""

from .app import build_app

__all__ = ["build_app"]
