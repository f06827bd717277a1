"""How Raft frames and commands are encoded: zlib of a pickle, as pysyncobj frames them, decoded safely.

pysyncobj 0.3.17 frames each message as ``length (4 bytes) | zlib(pickle(message))`` (Fernet-encrypted when a
password is set) and stores each command as a pickle too. Unpickling runs whatever a pickle names, so anyone
who reaches a Raft port (and, with a password, any holder of it) could run code in the node. ``SafePickle``
decodes with an unpickler that builds only plain values (dict, list, tuple, str, bytes, int, float, bool,
None) and the few classes the caller allows (the bridge: pysyncobj's ``TCPNode``, which membership changes
carry); anything else is ``ForbiddenPickle``, and pysyncobj drops a frame that fails to decode together with
its connection. Encoding stays pickle, so nodes of older kfed versions still read ours. What a frame inflates
to is bounded too (``inflate``): a stranger's zlib bomb cannot take the node's memory.

Nothing here imports pysyncobj: the bridge installs these in its place.
"""

from __future__ import annotations

import io
import logging
import pickle
import struct
import zlib
from collections.abc import Callable, Mapping
from typing import IO, Any, Final

from ..errors import KfedError

log = logging.getLogger(__name__)

PICKLE_PROTOCOL: Final = 4
"""What Raft commands and messages are pickled with (pysyncobj's own is 2, which has no bytes type: a command
travelled as a latin-1 str, 1.3-2.5x its size, and (un)pickling 16 KB cost ~400 us instead of ~5 us, on every
node, for every command, several times). Protocol 4 pickles bytes as bytes; any node unpickles both, so nodes
and journals of either kind mix."""


class ForbiddenPickle(KfedError, pickle.UnpicklingError):
    """A Raft frame or command names something other than the plain values Raft messages are made of."""


def _latin1_bytes(text: str, encoding: str) -> bytes:
    """What protocol 2 pickles a non-empty bytes value as: ``_codecs.encode(text, "latin1")``."""
    if not isinstance(text, str) or encoding != "latin1":
        raise ForbiddenPickle(f"_codecs.encode({type(text).__name__}, {encoding!r}) is not a pickled bytes value")
    return text.encode("latin-1")


def _empty_bytes(*args: object) -> bytes:
    """What protocol 2 pickles ``b""`` as: ``bytes()``. With an argument, ``bytes(n)`` would allocate n bytes."""
    if args:
        raise ForbiddenPickle("bytes() with arguments is not a pickled bytes value")
    return b""


PLAIN_GLOBALS: Final[Mapping[tuple[str, str], Callable[..., Any]]] = {
    # Protocol 2 (pysyncobj's default, older kfed nodes and their journals) has no opcode for bytes.
    ("_codecs", "encode"): _latin1_bytes,
    ("__builtin__", "bytes"): _empty_bytes,
    ("builtins", "bytes"): _empty_bytes,
}
"""The globals a pickle of plain values may name, each mapped to a stand-in that builds only that value."""


class SafePickle:
    """``loads``/``load`` that build plain values and instances of ``classes`` only (see the module doc).

    A ``pickle.Unpickler`` whose ``find_class`` is overridden: the C unpickler, which calls back into Python
    only when a pickle names a global, so plain messages decode at C speed (about 1 us more per message than
    ``pickle.loads``, for creating the unpickler). An allowed class is rebuilt the way pickle rebuilds any
    object (``__new__``, then its ``__dict__`` set from the pickle): no ``__init__``, no ``__setstate__`` of
    ours runs; allow only classes for which that is harmless."""

    def __init__(self, classes: Mapping[tuple[str, str], type] | None = None) -> None:
        allowed: dict[tuple[str, str], Any] = {**PLAIN_GLOBALS, **(classes or {})}

        class Unpickler(pickle.Unpickler):
            def find_class(self, module: str, name: str) -> Any:
                found = allowed.get((module, name))
                if found is None:
                    raise ForbiddenPickle(f"a Raft message may not name {module}.{name}")
                return found

        self._unpickler = Unpickler

    def loads(self, data: bytes | str) -> Any:
        """pysyncobj's ``pickle.loads``: ``str`` is taken as UTF-8 (as its ``to_bytes`` does)."""
        raw = data.encode() if isinstance(data, str) else data
        try:
            return self._unpickler(io.BytesIO(raw)).load()
        except ForbiddenPickle as e:
            log.warning("refused a Raft message: %s", e)
            raise

    def load(self, file: IO[bytes]) -> Any:
        return self._unpickler(file).load()


# -- compression ------------------------------------------------------------------------------------------
MAX_MESSAGE_BYTES: Final = 128 * 1024 * 1024
"""The most one Raft message may inflate to. The largest a node sends is an append_entries of 4 MiB of entries
(``bridge.APPEND_ENTRIES_BATCH_BYTES``) plus one more entry, a command that the codec decodes only up to 64 MiB
(``codec.MAX_DECODE_BYTES``); dump chunks are 4 MiB. A stranger's zlib bomb (deflate expands up to 1032:1) is
refused once it inflates past this, instead of taking the node's memory."""
_DEFLATE_MAX_RATIO: Final = 1032


class MessageTooLarge(KfedError, ValueError):
    """A Raft frame that inflates past ``MAX_MESSAGE_BYTES``."""


def inflate(data: bytes, limit: int = MAX_MESSAGE_BYTES) -> bytes:
    """``zlib.decompress(data)``, refusing (``MessageTooLarge``) to produce more than ``limit`` bytes."""
    if len(data) * _DEFLATE_MAX_RATIO <= limit:
        return zlib.decompress(data)  # cannot exceed the limit: zlib's own call, the fast one
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, limit)
    if inflater.unconsumed_tail:
        raise MessageTooLarge(f"a Raft message of {len(data)} bytes inflates past {limit} bytes")
    if not inflater.eof:
        raise zlib.error("incomplete or truncated stream")
    return out


class WireZlib:
    """Stands in for the ``zlib`` module in pysyncobj's TCP connections: its fixed level 3 becomes ours, and
    what a frame inflates to is bounded (``inflate``). Process-wide, like the module it replaces (every node
    of one process uses the same setting)."""

    decompress = staticmethod(inflate)

    def __init__(self, level: int) -> None:
        self.level = level

    def compress(self, data: bytes, _level: int = -1) -> bytes:
        if self.level == 0:
            return zlib_stored(data)
        return zlib.compress(data, self.level)


_STORED_BLOCK: Final = 0xFFFF  # the most a stored deflate block holds (RFC 1951, 3.2.4)
_STORED_HEAD: Final = struct.Struct("<BHH")  # BFINAL|BTYPE=00 (byte-aligned), LEN, NLEN
_ZLIB_HEAD: Final = b"\x78\x01"  # deflate, 32 KB window, no dictionary, "fastest" (FCHECK: a multiple of 31)


def zlib_stored(data: bytes) -> bytes:
    """``zlib.compress(data, 0)`` by hand: a zlib stream (RFC 1950) of stored deflate blocks, which any zlib
    reads. zlib's own level 0 still sets up a deflate stream per call (~256 KB of state at the default window),
    and pysyncobj compresses every message: 8% of a busy follower's py-spy samples, for a few bytes of framing."""
    view = memoryview(data)
    parts: list[bytes | memoryview] = [_ZLIB_HEAD]
    start = 0
    while True:
        block = view[start : start + _STORED_BLOCK]
        start += len(block)
        final = start >= len(data)
        parts += (_STORED_HEAD.pack(final, len(block), len(block) ^ 0xFFFF), block)
        if final:
            break
    parts.append(zlib.adler32(data).to_bytes(4, "big"))
    return b"".join(parts)
