"""The decode worker: the thread that owns the engine, and the views it publishes.

- :mod:`.thread` — :class:`Worker`: the thread, the command queue, the parts put together
- :mod:`.key_lane` — the state lock, lent during a step's decode to answer sampler keys
- :mod:`.publisher` — the latest view and the publish throttle
- :mod:`.parts` — the protocol the command modules are typed with
- :mod:`.commands` — one frozen dataclass per command; the worker dispatches on the type
- :mod:`.state` — what a chat holds beyond the engine (mode, notice, spans, picks)
- :mod:`.chat` — spans of the context and sending a message
- :mod:`.stepping` — stepping, autoplay, rewind, forked sequences
- :mod:`.sampler_keys` — the ladders the sampler keys move along
- :mod:`.attention` — attention capture on the worker's side
- :mod:`.saving`, :mod:`.session_store`, :mod:`.resume` — saved sessions
- :mod:`.views`, :mod:`.build`, :mod:`.caches` — the view, built per pane, with its caches

Nothing here imports Textual or Rich.
"""

from .thread import Worker
from .views import View

__all__ = ["View", "Worker"]
