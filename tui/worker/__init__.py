"""The decode worker: the thread that owns the engine, and the views it publishes.

:class:`Worker` (:mod:`.thread`) puts the parts together; the README's Architecture maps the
modules by owner. Nothing here imports Textual or Rich.
"""

from .thread import Worker
from .views import View

__all__ = ["View", "Worker"]
