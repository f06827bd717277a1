"""How Raft frames and commands are encoded: zlib of a pickle, as pysyncobj frames them, decoded safely.

pysyncobj 0.3.17 frames each message as ``length (4 bytes) | zlib(pickle(message))`` (Fernet-encrypted when a
password is set) and stores each command as a pickle too. Unpickling runs whatever a pickle names, so anyone
who reaches a Raft port (and, with a password, any holder of it) could run code in the node. ``SafePickle``
decodes with an unpickler that builds only plain values (dict, list, tuple, str, bytes, int, float, bool,
None) and instances of the few value classes the caller allows (the bridge: pysyncobj's ``TCPNode``, which
membership changes carry, rebuilt only as ``TCPNode(address)`` builds one); anything else is
``ForbiddenPickle``, and pysyncobj drops a frame that fails to decode together with its connection. A pickle
cannot change what it names, and what it makes the stand-ins build is bounded by its own size. Encoding stays
pickle, so nodes of older kfed versions still read ours. What a frame inflates to is bounded too
(``inflate``): a stranger's zlib bomb cannot take the node's memory.

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

from metadata_log import codec
from metadata_log.errors import KfedError

log = logging.getLogger(__name__)

PICKLE_PROTOCOL: Final = 4
"""What Raft commands and messages are pickled with (pysyncobj's own is 2, which has no bytes type: a command
travels as a latin-1 str, larger than its bytes, and is (un)pickled through a codec call instead of a copy, on
every node, for every command, several times). Protocol 4 pickles bytes as bytes; any node unpickles both, so nodes
and journals of either kind mix."""


class ForbiddenPickle(KfedError, pickle.UnpicklingError):
    """A Raft frame or command names something other than the plain values Raft messages are made of."""


class Budget:
    """What the stand-ins of one decode may still build, in bytes. A real pickle carries every value it makes
    literally (protocol 2 pickles a bytes value as its latin-1 text), so the stand-ins of a real pickle never
    build more than it holds; a pickle that memoizes one string and calls a stand-in on it again and again, a
    few bytes each time, would."""

    __slots__ = ("left", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.left = size

    def charge(self, size: int, what: str) -> None:
        if size > self.left:
            raise ForbiddenPickle(f"{what} would build more than the {self.size}-byte pickle holds")
        self.left -= size


class StandIn:
    """What the unpickler hands out for a global a plain pickle may name: a callable that builds only that value.

    A pickle can do more with what it names than call it: BUILD ``setattr``s a state on it. A stand-in has no
    ``__dict__`` and refuses to have an attribute set or deleted, so that fails; and each decode gets stand-ins
    of its own, charged to its ``Budget``."""

    __slots__ = ("_budget",)
    _budget: Budget

    def __init__(self, budget: Budget) -> None:
        object.__setattr__(self, "_budget", budget)

    def __setattr__(self, name: str, value: object) -> None:
        raise ForbiddenPickle(f"a Raft message may not change {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise ForbiddenPickle(f"a Raft message may not change {type(self).__name__}")


class Latin1Bytes(StandIn):
    """What protocol 2 pickles a non-empty bytes value as: ``_codecs.encode(text, "latin1")``."""

    __slots__ = ()

    def __call__(self, text: str, encoding: str) -> bytes:
        if not isinstance(text, str) or encoding != "latin1":
            raise ForbiddenPickle(f"_codecs.encode({type(text).__name__}, {encoding!r}) is not a pickled bytes value")
        self._budget.charge(len(text), "_codecs.encode")
        return text.encode("latin-1")


class EmptyBytes(StandIn):
    """What protocol 2 pickles ``b""`` as: ``bytes()``. With an argument, ``bytes(n)`` would allocate n bytes."""

    __slots__ = ()

    def __call__(self, *args: object) -> bytes:
        if args:
            raise ForbiddenPickle("bytes() with arguments is not a pickled bytes value")
        return b""


MakeStandIn = Callable[[Budget], Any]
"""Makes what one decode is handed for a global: a ``StandIn``, or a class made by ``value_class``."""

PLAIN_GLOBALS: Final[Mapping[tuple[str, str], MakeStandIn]] = {
    # Protocol 2 (pysyncobj's default, older kfed nodes and their journals) has no opcode for bytes.
    ("_codecs", "encode"): Latin1Bytes,
    ("__builtin__", "bytes"): EmptyBytes,
    ("builtins", "bytes"): EmptyBytes,
}
"""The globals a pickle of plain values may name, each mapped to a stand-in that builds only that value."""


class Sealed(type):
    """The metaclass of the classes handed to the unpickler: none of their attributes can be set or deleted (a
    BUILD on the class itself fails)."""

    def __setattr__(cls, name: str, value: object) -> None:
        raise ForbiddenPickle(f"a Raft message may not change {cls.__name__}")

    def __delattr__(cls, name: str) -> None:
        raise ForbiddenPickle(f"a Raft message may not change {cls.__name__}")


VALUE_CHARGE_BYTES: Final = 24
"""What rebuilding one instance of a value class is charged, besides its argument: less than the pickle of one
carries besides its argument (the references to its class and keys, the opcodes that build it: about 30 bytes
for a ``TCPNode``, plus its host and port)."""


def value_class(cls: type, make: Callable[[Any], Any], key: str) -> MakeStandIn:
    """Lets a pickle carry instances of ``cls`` that ``make(argument)`` builds (pysyncobj's ``TCPNode``, from its
    address), and nothing else of it.

    pickle rebuilds such an instance in one of two ways, both accepted: ``cls(argument)`` (REDUCE), or
    ``cls.__new__(cls)`` then its ``__dict__`` set from the pickle (NEWOBJ, BUILD: what ``pickle.dumps`` writes).
    Each decode gets a sealed subclass of ``cls`` of its own; an instance of it is built only through ``make``,
    which checks the argument, and a BUILD state must be exactly the ``__dict__`` of ``make(state[key])``, given
    once. Once the whole pickle is decoded, ``finish_values`` turns every instance into a plain ``cls``, and
    refuses an instance left without its state, or the class itself as a value."""

    def stand_in_class(budget: Budget) -> type:
        def __new__(stand_in: type, *args: Any) -> Any:
            budget.charge(VALUE_CHARGE_BYTES, cls.__name__)
            instance: Any = object.__new__(stand_in)
            if args:  # REDUCE: cls(argument)
                if len(args) != 1:
                    raise ForbiddenPickle(f"{cls.__name__} is rebuilt from one argument, not {len(args)}")
                budget.charge(len(args[0]) if isinstance(args[0], str) else 0, cls.__name__)
                vars(instance).update(vars(make(args[0])))
            return instance

        def __init__(self: Any, *args: Any) -> None:
            """Built by ``__new__`` already."""

        def __setstate__(self: Any, state: Any = Sealed) -> None:
            if state is Sealed:  # a BUILD on the class: ``cls.__setstate__(state)``
                raise ForbiddenPickle(f"a Raft message may not change {cls.__name__}")
            if vars(self) or not isinstance(state, dict):
                raise ForbiddenPickle(f"a {cls.__name__} is given its state once, as a dict")
            argument = state.get(key)
            budget.charge(len(argument) if isinstance(argument, str) else 0, cls.__name__)
            built = vars(make(argument))
            if state != built:
                raise ForbiddenPickle(f"a pickled {cls.__name__} is not what {cls.__name__}({argument!r}) builds")
            vars(self).update(built)  # the values ``make`` built (the pickle's may differ in type: True == 1)

        namespace = {"__new__": __new__, "__init__": __init__, "__setstate__": __setstate__, "_kfed_rebuilds": cls}
        return Sealed(cls.__name__, (cls,), namespace)

    return stand_in_class


def finish_values(value: Any) -> None:
    """After a decode that handed out a ``value_class``: every instance of one, wherever it sits in ``value``,
    becomes a plain instance of its class; ``ForbiddenPickle`` for one left without its state, a class, or a
    stand-in (none is a value a Raft message holds)."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if type(kind) is Sealed:
            if not vars(item):
                raise ForbiddenPickle(f"a pickled {kind.__name__} was never given its state")
            item.__class__ = kind._kfed_rebuilds  # set by value_class
        elif kind in (list, tuple, set, frozenset, dict):
            if id(item) not in seen:
                seen.add(id(item))
                stack.extend(item.items() if kind is dict else item)
        elif isinstance(item, type | StandIn):
            raise ForbiddenPickle(f"a Raft message may not hold {item!r}")


class SafePickle:
    """``loads``/``load`` that build plain values and the value classes given only (see the module doc).

    A ``pickle.Unpickler`` whose ``find_class`` is overridden: the C unpickler, which calls back into Python
    only when a pickle names a global, so plain messages decode at C speed (what it adds to ``pickle.loads`` is
    creating the unpickler). A global is answered with a stand-in made for this decode
    (``PLAIN_GLOBALS``, and ``classes``: each made by ``value_class``); what the stand-ins build is bounded by
    the pickle's own size (``Budget``)."""

    def __init__(self, classes: Mapping[tuple[str, str], MakeStandIn] | None = None) -> None:
        allowed: dict[tuple[str, str], MakeStandIn] = {**PLAIN_GLOBALS, **(classes or {})}
        value_classes = frozenset(classes or ())

        class Unpickler(pickle.Unpickler):
            size = 0  # of the pickle: set by ``loads`` before ``load``
            budget: Budget | None = None
            values = False  # a value class was handed out: ``finish_values`` once decoded

            def find_class(self, module: str, name: str) -> Any:
                make = allowed.get((module, name))
                if make is None:
                    raise ForbiddenPickle(f"a Raft message may not name {module}.{name}")
                if self.budget is None:
                    self.budget = Budget(self.size)
                if (module, name) in value_classes:
                    self.values = True
                return make(self.budget)

        self._unpickler = Unpickler

    def loads(self, data: bytes | str) -> Any:
        """pysyncobj's ``pickle.loads``: ``str`` is taken as UTF-8 (as its ``to_bytes`` does)."""
        raw = data.encode() if isinstance(data, str) else data
        unpickler = self._unpickler(io.BytesIO(raw))
        unpickler.size = len(raw)
        try:
            value = unpickler.load()
            if unpickler.values:
                finish_values(value)
            return value
        except ForbiddenPickle as e:
            log.warning("refused a Raft message: %s", e)
            raise

    def load(self, file: IO[bytes]) -> Any:
        return self.loads(file.read())


# -- how big a message and a frame get -------------------------------------------------------------------------
APPEND_ENTRIES_BATCH_BYTES: Final = 4 * 1024 * 1024
"""pysyncobj's ``appendEntriesBatchSizeBytes`` and ``logCompactionBatchSize``: what one append_entries carries
(each entry counted with ``ENTRY_PICKLE_BYTES``, see ``bridge.Replica``), and one chunk of a dump sent to a
follower."""
SOCKET_BUFFER_BYTES: Final = 4 * 1024 * 1024
"""Kernel send and receive buffer of each Raft connection (pysyncobj pins them to 64 KiB otherwise)."""
MAX_COMMAND_BYTES: Final = codec.MAX_DECODE_BYTES
"""The largest command a node proposes (``RaftNode.propose`` refuses more): no node could decode a bigger one."""
ENTRY_PICKLE_BYTES: Final = 32
"""What a log entry (command, index, term) pickles to besides its command's bytes: at most 25."""
MAX_MESSAGE_BYTES: Final = APPEND_ENTRIES_BATCH_BYTES + MAX_COMMAND_BYTES + ENTRY_PICKLE_BYTES + 64 * 1024
"""The most one Raft message pickles to: an append_entries of entries up to ``APPEND_ENTRIES_BATCH_BYTES``,
the entry that crosses it (a command of up to ``MAX_COMMAND_BYTES``), and its other fields (a dump chunk or a
chunk of a big entry is smaller). What a frame may inflate to: a stranger's zlib bomb (deflate expands up to
1032:1) is refused past this."""


def _fernet_bytes(size: int) -> int:
    """The length of a Fernet token of ``size`` bytes: base64 of version, time, IV, padded AES-CBC, HMAC."""
    return 4 * -(-(1 + 8 + 16 + 16 * (size // 16 + 1) + 32) // 3)


def _zlib_bound(size: int) -> int:
    """zlib's compressBound (any level, ``zlib_stored`` included)."""
    return size + (size >> 12) + (size >> 14) + (size >> 25) + 13


MAX_FRAME_BYTES: Final = _fernet_bytes(_zlib_bound(MAX_MESSAGE_BYTES + 64))  # + the pickled key with a password
"""The most a Raft frame may declare (its 4-byte length): ``MAX_MESSAGE_BYTES`` compressed (at worst a little
bigger) and, with a password, Fernet-encrypted (base64: 4/3 of it). A connection whose next frame declares
more, or a negative length, is dropped as soon as the length has arrived, before anything is buffered."""
HELLO_FRAME_BYTES: Final = 64 * 1024
"""The most the first frame of an accepted connection may declare: it is a voter's address, a key exchange
or an admin command of pysyncobj's, all small; a stranger gets no further without the password."""


class FrameTooLarge(KfedError, ValueError):
    """A Raft frame whose declared length is negative or above the connection's limit."""


_FRAME_HEAD: Final = struct.Struct("i")  # pysyncobj's: struct.pack('i', len(data)), native order


class FrameBuffer:
    """What a Raft connection has received: frames of ``length (4 bytes) | payload``, each at most ``limit``.

    What one receive brings is kept as it is while it holds whole frames (each is then copied out once, as
    pysyncobj did); a frame that spans receives is gathered in a bytearray that grows in place: receiving it
    costs its size, not the square of it (pysyncobj's buffer was a bytes object copied whole on every receive,
    on the Raft thread). Reading stops once the first frame is whole (``add``), so a peer sending faster than
    the node parses cannot grow the buffer past one frame and one receive."""

    __slots__ = ("data", "limit", "start")

    def __init__(self, limit: int) -> None:
        self.data: bytes | bytearray = b""
        self.start = 0  # where the first frame not taken yet begins in ``data``
        self.limit = limit

    def add(self, received: bytes) -> bool:
        """Append what was received; False once the first frame is whole (parse it before reading more).
        ``FrameTooLarge`` as soon as the first frame's length is there and out of bounds."""
        data, start = self.data, self.start
        if start == len(data):  # nothing pending: keep what was received as it is
            data = self.data = received
            start = self.start = 0
        else:
            if isinstance(data, bytearray):
                del data[:start]  # O(1) from the front of a bytearray
            else:  # a frame spans receives: gathered in place from here on
                data = bytearray(memoryview(data)[start:])
            data += received
            self.data = data
            self.start = start = 0
        pending = len(data) - start - _FRAME_HEAD.size
        return pending < 0 or pending < self._size_at(start)

    def next_frame(self) -> bytes | None:
        """The payload of the first frame, taken out of the buffer, once it is whole (``FrameTooLarge`` if its
        length is out of bounds)."""
        data, start = self.data, self.start
        if len(data) - start < _FRAME_HEAD.size:
            return None
        end = start + _FRAME_HEAD.size + self._size_at(start)
        if len(data) < end:
            return None
        if type(data) is bytes:
            frame = data[start + _FRAME_HEAD.size : end]
        else:
            frame = bytes(memoryview(data)[start + _FRAME_HEAD.size : end])
        if end == len(data):
            self.data, self.start = b"", 0
        else:
            self.start = end
        return frame

    def clear(self) -> None:
        self.data, self.start = b"", 0

    def _size_at(self, start: int) -> int:
        (size,) = _FRAME_HEAD.unpack_from(self.data, start)
        if not 0 <= size <= self.limit:
            raise FrameTooLarge(f"a Raft frame declares {size} bytes; at most {self.limit} are taken here")
        return int(size)


# -- compression ------------------------------------------------------------------------------------------
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
    and pysyncobj compresses every message, on the Raft thread, for a few bytes of framing."""
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
