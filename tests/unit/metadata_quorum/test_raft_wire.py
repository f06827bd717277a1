"""Raft frames: our compression level, and an unpickler that builds plain values only.

The messages below are every kind pysyncobj 0.3.17 sends (syncobj.py, transport.py, tcp_connection.py) and the
pre-votes kfed adds; the forbidden pickles are the usual ways a pickle runs code. Each forbidden one is shown to
do harm through plain ``pickle.loads`` first (where it can), so the test cannot pass by accident.
"""

from __future__ import annotations

import copyreg
import os
import pickle
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pysyncobj.node import Node, TCPNode

from metadata_quorum import bridge, wire

SAFE = bridge.SAFE_PICKLE
COMMAND = b"\x00" + pickle.dumps((0, (b"\x93\x01\x02" * 100,)), 4)  # a regular command: (method id, (bytes,))

# fmt: off
MESSAGES: dict[str, Any] = {
    "hello (a node's address)": "127.0.0.1:9101",
    "hello (read-only)": "readonly",
    "encryption key exchange": os.urandom(32),
    "utility command": ["status"],
    "utility answer": {"self": "127.0.0.1:9101", "leader": "127.0.0.1:9102", "log_len": 3, "uptime": 12},
    "request_vote": {"type": "request_vote", "term": 4, "last_log_index": 120, "last_log_term": 3},
    "response_vote": {"type": "response_vote", "term": 4},
    "append_entries": {
        "type": "append_entries",
        "term": 4,
        "commit_index": 119,
        "prevLogIdx": 119,
        "prevLogTerm": 3,
        "entries": [(COMMAND, 120, 4), (b"\x01", 121, 4)],
    },
    "append_entries, a big entry's chunk": {
        "type": "append_entries",
        "transmission": "process",
        "data": COMMAND[:100],
        "term": 4,
        "commit_index": 119,
        "prevLogIdx": 119,
        "prevLogTerm": 3,
    },
    "append_entries, a snapshot chunk": {
        "type": "append_entries",
        "term": 4,
        "commit_index": 119,
        "serialized": (b"dump bytes", True, False),
    },
    "append_entries, the last snapshot chunk": {
        "type": "append_entries",
        "term": 4,
        "commit_index": 119,
        "serialized": (b"", False, True),
    },
    "append_entries, no snapshot ready": {"type": "append_entries", "term": 4, "commit_index": 1, "serialized": None},
    "next_node_idx": {"type": "next_node_idx", "next_node_idx": 122, "reset": False, "success": True, "term": 4},
    "apply_command": {"type": "apply_command", "command": COMMAND, "request_id": 7},
    "apply_command_response": {"type": "apply_command_response", "request_id": 7, "log_idx": 122, "log_term": 4},
    "apply_command_response, failed": {"type": "apply_command_response", "request_id": 7, "error": 3},
    "timeout_now": {"type": "timeout_now", "term": 4},
    "kfed_pre_vote": {"type": "kfed_pre_vote", "term": 5, "log": [4, 122]},
    "kfed_pre_vote_reply": {"type": "kfed_pre_vote_reply", "term": 5, "granted": True},
    "an encrypted frame's content": (os.urandom(32), {"type": "response_vote", "term": 4}),
    "a float": 0.25,
}
# fmt: on


@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.parametrize("name", list(MESSAGES))
def test_every_message_pysyncobj_sends_decodes_as_with_pickle(name: str, protocol: int) -> None:
    data = pickle.dumps(MESSAGES[name], protocol)
    assert SAFE.loads(data) == pickle.loads(data) == MESSAGES[name]


@pytest.mark.parametrize("protocol", [2, 4])
def test_commands_decode_as_pysyncobj_stores_them(protocol: int) -> None:
    regular = (0, (b"\x93\x01\x02",))  # a replicated call: (method id, args)
    assert SAFE.loads(pickle.dumps(regular, protocol)) == regular
    assert SAFE.loads(pickle.dumps(1, protocol)) == 1  # a code version change
    # A membership change carries the node: rebuilt from its attributes, equal to the one sent.
    node = TCPNode("127.0.0.1:9104")
    kind, node_id, decoded = SAFE.loads(pickle.dumps(["add", node.id, node], protocol))
    assert (kind, node_id, decoded) == ("add", "127.0.0.1:9104", node)
    assert type(decoded) is TCPNode
    assert (decoded.address, decoded.host, decoded.port) == ("127.0.0.1:9104", "127.0.0.1", 9104)


def test_protocol_2_bytes_are_rebuilt_without_calling_what_the_pickle_names() -> None:
    # Protocol 2 has no bytes opcode: it names _codecs.encode (non-empty) and bytes (empty); both are stand-ins.
    assert b"_codecs" in pickle.dumps(b"\xff\x00abc", 2) and b"bytes" in pickle.dumps(b"", 2)
    for value in (b"\xff\x00abc", b""):
        assert SAFE.loads(pickle.dumps(value, 2)) == value
    # pysyncobj's loads takes a str as UTF-8 (a big entry's chunks start out as one)
    assert SAFE.loads(pickle.dumps([1, "a"], 0).decode()) == [1, "a"]


class Run:
    """Unpickling this calls ``func(*args)``: the classic code-running pickle."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.func, self.args


def forbidden(marker: Path) -> dict[str, bytes]:
    """Pickles that name something other than plain values; those that can, create ``marker``."""
    return {
        "os.system": pickle.dumps(Run(os.system, f"touch {marker}"), 4),
        "os.system, protocol 2": pickle.dumps(Run(os.system, f"touch {marker}"), 2),
        "builtins.open": pickle.dumps(Run(open, str(marker), "w"), 4),
        "builtins.eval": pickle.dumps(Run(eval, f"open({str(marker)!r}, 'w')"), 4),
        "GLOBAL of protocol 0": f"cposix\nsystem\n(Vtouch {marker}\ntR.".encode(),
        "INST of protocol 0": f"(Vtouch {marker}\nios\nsystem\n.".encode(),
        "a TCPNode method by a dotted name": b"\x80\x04\x8c\x0epysyncobj.node\x8c\x10TCPNode.__init__\x93.",
        "pysyncobj.node.Node (not a class messages carry)": pickle.dumps(Node("x"), 4),
        "a persistent id": b"\x80\x04\x8c\x01x\x94Q.",
        "an extension code (registered by the test)": b"\x80\x02\x82\x7f.",
        "an extension code nobody registered": b"\x80\x02\x82\x7e.",
        "_codecs.encode of another codec": b"\x80\x02c_codecs\nencode\nX\x03\x00\x00\x00abcX\x03\x00\x00\x00hex\x86R.",
        "bytes(n): a huge allocation": b"\x80\x02c__builtin__\nbytes\nJ\x00\xca\x9a;\x85R.",
        **MUTATING,
    }


def build_slots(global_line: bytes, state: bytes) -> bytes:
    """A pickle that names a global and BUILDs a (None, {slot: value}) state on it: ``setattr`` on what it named."""
    return b"\x80\x02c" + global_line + b"\nN}" + state + b"s\x86b."


def text(value: str) -> bytes:
    """BINUNICODE of ``value``."""
    raw = value.encode()
    return b"X" + len(raw).to_bytes(4, "little") + raw


def node(rest: bytes) -> bytes:
    """A pickle naming TCPNode, then ``rest``; padded (a string pushed and popped) so that its size leaves room to
    rebuild a node: each case is refused for its own reason, not by the budget."""
    return b"\x80\x02" + text("p" * 200) + b"0cpysyncobj.node\nTCPNode\n" + rest


TCPNODE = b"pysyncobj.node\nTCPNode"


def node_state(host: str = "a") -> bytes:
    """A dict: ``TCPNode("a:1").__dict__`` (with another host: not what TCPNode("a:1") builds)."""
    keys_values = ("_id", "a:1", "_TCPNode__address", "a:1", "_TCPNode__host", host, "_TCPNode__port")
    return b"}(" + b"".join(text(v) for v in keys_values) + b"K\x01u"


STATE = node_state()
EVIL_HOST = b"}" + text("_TCPNode__host") + text("evil") + b"sb."  # BUILD: set one attribute
MUTATING: dict[str, bytes] = {
    # BUILD with a slot state setattr()s on whatever is below it: here the class or the stand-in the unpickler
    # handed out, for every later user in the process.
    "BUILD on TCPNode: every node unhashable": build_slots(TCPNODE, text("__hash__") + b"N"),
    "BUILD on TCPNode: every node's port redirected": build_slots(TCPNODE, text("port") + b"K\x07"),
    "BUILD on TCPNode: every node's ip redirected": build_slots(TCPNODE, text("ip") + text("10.6.6.6")),
    "BUILD on TCPNode with a dict state": node(b"}" + text("ip") + text("10.6.6.6") + b"sb."),
    "BUILD on _codecs.encode: its defaults": build_slots(b"_codecs\nencode", text("__defaults__") + b")"),
    "BUILD on _codecs.encode: its code": build_slots(b"_codecs\nencode", text("__call__") + b"N"),
    "BUILD on bytes": build_slots(b"__builtin__\nbytes", text("__defaults__") + b")"),
    # A node is rebuilt only as pysyncobj pickles one: from an address, or given exactly its own state once.
    "TCPNode(an int)": node(b"K\x07\x85R."),
    "TCPNode(an address too long to be one)": node(text("h" * 5000 + ":1") + b"\x85R."),
    "TCPNode(an address without a port)": node(text("host") + b"\x85R."),
    "TCPNode(two arguments)": node(text("a:1") + text("a:2") + b"\x86R."),
    "a TCPNode never given its state": node(b")\x81."),
    "the TCPNode class itself": node(b"."),
    "a TCPNode whose state disagrees with its address": node(b")\x81" + node_state("evil") + b"b."),
    "a TCPNode with an extra attribute": node(b")\x81" + STATE[:-1] + text("ip") + text("evil") + b"ub."),
    "a TCPNode given its state twice": node(b")\x81" + STATE + b"b" + EVIL_HOST),
    "a TCPNode built from its address, then given a state": node(text("a:1") + b"\x85R" + EVIL_HOST),
    "a stand-in as a value": node(text("a:1") + b"\x85Rc_codecs\nencode\n\x86."),
}  # fmt: skip


def stand_ins() -> dict[str, Any]:
    """What a pickle could change in the process: TCPNode's class dict, and each stand-in's state."""
    seen: dict[str, Any] = {"TCPNode": dict(vars(TCPNode)), "Node": dict(vars(Node))}
    for name, stand_in in wire.PLAIN_GLOBALS.items():
        seen[".".join(name)] = (dict(getattr(stand_in, "__dict__", {})), getattr(stand_in, "__defaults__", None))
    return seen


def test_a_pickle_that_names_anything_else_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    pickles = forbidden(marker)
    # The attack is real: plain pickle runs it.
    pickle.loads(pickles["os.system"])
    assert marker.exists()
    marker.unlink()
    before = stand_ins()
    copyreg.add_extension("posix", "system", 0x7F)
    try:
        for name, data in pickles.items():
            with pytest.raises((pickle.UnpicklingError, ValueError)):  # pysyncobj drops the frame on any error
                SAFE.loads(data)
            assert not marker.exists(), name
            assert stand_ins() == before, name
    finally:
        copyreg.remove_extension("posix", "system", 0x7F)
    # and what they would have changed still works
    assert hash(TCPNode("127.0.0.1:9101")) == hash("127.0.0.1:9101") and TCPNode("h:7").port == 7
    assert SAFE.loads(pickle.dumps([b"\xff\x00abc", b""], 2)) == [b"\xff\x00abc", b""]
    # the dotted name is a well-formed pickle that plain pickle resolves
    assert pickle.loads(pickles["a TCPNode method by a dotted name"]) is TCPNode.__init__


def test_the_refusal_names_what_the_pickle_named(tmp_path: Path) -> None:
    with pytest.raises(wire.ForbiddenPickle, match=r"posix\.system"):
        SAFE.loads(forbidden(tmp_path / "ran")["os.system"])
    with pytest.raises(wire.ForbiddenPickle, match=r"_codecs\.encode"):
        SAFE.loads(forbidden(tmp_path / "ran")["_codecs.encode of another codec"])


def amplifying_pickle(text_bytes: int, calls: int) -> bytes:
    """A protocol-2 pickle that memoizes one string and calls ``_codecs.encode`` on it ``calls`` times: each
    call, a few bytes of pickle, would build a fresh copy (a list of ``calls`` bytes values of that size)."""
    body = bytearray(b"\x80\x02]q\x00c_codecs\nencode\nq\x010")
    body += text("A" * text_bytes) + b"q\x020" + text("latin1") + b"q\x030("
    body += b"h\x01h\x02h\x03\x86R" * calls
    return bytes(body + b"e.")


def test_a_pickle_cannot_make_its_stand_ins_build_more_than_it_holds() -> None:
    amplifying = amplifying_pickle(1 << 20, 64)  # 1 MiB of pickle that would decode to 64 MiB
    assert len(zlib.compress(amplifying, 9)) < 2000
    assert len(pickle.loads(amplifying)) == 64  # the attack is real: plain pickle builds it
    with pytest.raises(wire.ForbiddenPickle, match="more than"):
        SAFE.loads(amplifying)
    # a real protocol-2 pickle carries every bytes value literally: any mix decodes
    values = [bytes(range(256)) * 40, b"\xff" * 70_000, b"", b"a", bytes(1000)] * 3
    assert SAFE.loads(pickle.dumps(values, 2)) == values
    assert SAFE.loads(pickle.dumps({"type": "append_entries", "entries": [(v, 1, 1) for v in values]}, 2))


def zlib_bomb(inflated_bytes: int) -> bytes:
    deflate = zlib.compressobj(9)
    chunk = bytes(1 << 20)
    return b"".join(deflate.compress(chunk) for _ in range(inflated_bytes >> 20)) + deflate.flush()


def test_a_frame_inflates_as_zlib_does_up_to_its_limit() -> None:
    text = b"PartitionsAdded" * 1000
    packed = zlib.compress(text)
    for limit in (len(text), 10 * len(text), wire.MAX_MESSAGE_BYTES):  # the bounded path and zlib's own
        assert wire.inflate(packed, limit) == text
        assert wire.inflate(packed + b"trailing", limit) == zlib.decompress(packed + b"trailing")
        with pytest.raises(zlib.error):
            wire.inflate(packed[:-5], limit)
    with pytest.raises(wire.MessageTooLarge):
        wire.inflate(packed, len(text) - 1)


def test_a_zlib_bomb_is_refused_before_it_takes_the_nodes_memory() -> None:
    bomb = zlib_bomb(wire.MAX_MESSAGE_BYTES + (1 << 20))  # ~130 KB that would inflate to 129 MiB
    assert len(bomb) < 200_000
    with pytest.raises(wire.MessageTooLarge, match="inflates past"):
        wire.WireZlib(0).decompress(bomb)


def test_raft_messages_use_our_compression_level_and_stay_zlib_streams() -> None:
    message = b"PartitionsAdded" * 1000
    for level in (0, 3):
        wire_zlib = wire.WireZlib(level)
        packed = wire_zlib.compress(message, 3)  # pysyncobj passes its own level 3: ignored
        assert packed == zlib.compress(message, level) and zlib.decompress(packed) == message


@pytest.mark.parametrize("size", [0, 1, 70, 65_534, 65_535, 65_536, 2 * 65_535, 2 * 65_535 + 1, 300_000])
def test_level_0_is_a_zlib_stream_of_stored_blocks_at_every_block_boundary(size: int) -> None:
    message = bytes(range(256)) * (size // 256) + bytes(size % 256)
    packed = wire.zlib_stored(message)
    assert zlib.decompress(packed) == message
    blocks = max(1, -(-size // 65_535))
    assert len(packed) == 2 + 5 * blocks + size + 4  # header, a 5-byte head per block, the bytes, Adler-32


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=12), st.lists(st.integers(1, 400), min_size=1, max_size=8))
def test_frames_come_out_whole_and_in_order_however_the_stream_is_cut(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(struct.pack("i", len(p)) + p for p in payloads)
    frames = wire.FrameBuffer(limit=300)
    out: list[bytes] = []
    pos = 0
    for step in range(len(stream)):
        if pos >= len(stream):
            break
        size = cuts[step % len(cuts)]
        more = frames.add(stream[pos : pos + size])
        pos += size
        first = frames.next_frame()
        assert more == (first is None)  # reading goes on exactly while no whole frame is pending
        while first is not None:
            out.append(first)
            first = frames.next_frame()
    assert out == payloads


@pytest.mark.parametrize("size", [-1, -(2**31), 301, 2**31 - 1])
def test_a_frame_length_out_of_bounds_is_refused_as_soon_as_it_arrives(size: int) -> None:
    frames = wire.FrameBuffer(limit=300)
    assert not frames.add(struct.pack("i", 5) + b"hello" + struct.pack("i", size)[:2])  # a frame, half a length
    assert frames.next_frame() == b"hello"
    with pytest.raises(wire.FrameTooLarge, match=f"declares {size} bytes"):
        frames.add(struct.pack("i", size)[2:])
    with pytest.raises(wire.FrameTooLarge):
        frames.next_frame()
