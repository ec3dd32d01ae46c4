"""The server side of RFC 6455 framing, enough to answer the API server's exec protocol.

Kubernetes exec over websocket (the channel.k8s.io family): every binary message starts with one
byte naming the stream (0 stdin, 1 stdout, 2 stderr, 3 the error/status channel); on v4 and v5 the
status channel carries a metav1.Status JSON when the command ends.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import BinaryIO

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_TEXT, OP_BINARY, OP_CLOSE = 0x1, 0x2, 0x8
STDOUT, STDERR, STATUS = 1, 2, 3
FRAME_CHUNK = 16 * 1024  # long output goes out as several messages, as the API server's does


def accept_key(client_key: str) -> str:
    return base64.b64encode(hashlib.sha1((client_key + _GUID).encode()).digest()).decode()


def write_frame(out: BinaryIO, opcode: int, payload: bytes) -> None:
    """A final, unmasked frame (servers never mask)."""
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([n])
    elif n < 1 << 16:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    out.write(head + payload)


def write_channel(out: BinaryIO, channel: int, data: bytes) -> None:
    for start in range(0, len(data), FRAME_CHUNK):
        write_frame(out, OP_BINARY, bytes([channel]) + data[start : start + FRAME_CHUNK])


def write_close(out: BinaryIO, code: int = 1000) -> None:
    write_frame(out, OP_CLOSE, struct.pack("!H", code))


def read_frame(inp: BinaryIO) -> tuple[int, bytes]:
    """One client frame (clients always mask). Raises EOFError when the peer is gone."""
    head = _read_exact(inp, 2)
    opcode, masked, n = head[0] & 0x0F, head[1] & 0x80, head[1] & 0x7F
    if n == 126:
        n = struct.unpack("!H", _read_exact(inp, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", _read_exact(inp, 8))[0]
    mask = _read_exact(inp, 4) if masked else b"\0\0\0\0"
    payload = bytes(b ^ mask[i % 4] for i, b in enumerate(_read_exact(inp, n)))
    return opcode, payload


def _read_exact(inp: BinaryIO, n: int) -> bytes:
    data = inp.read(n) if n else b""
    if len(data) < n:
        raise EOFError("websocket peer closed")
    return data
