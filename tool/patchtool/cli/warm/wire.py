"""The wire between a caller and a warm process: a frame is a length and byte fields, each a
length and its bytes; the caller's descriptors and credentials ride with the request. Nothing
is evaluated or unpickled."""

from __future__ import annotations

import _socket
import os
import struct

TYPE_CHECKING = False  # typing itself costs the caller 9 ms

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

_LENGTH = struct.Struct("!I")
_MAX_FRAME = 1 << 24


def send(conn: _socket.socket, fields: Sequence[bytes], *, fds: Sequence[int] = ()) -> None:
    payload = b"".join(_LENGTH.pack(len(f)) + f for f in fields)
    frame = _LENGTH.pack(len(payload)) + payload
    ancillary = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))] if fds else []
    sent = conn.sendmsg([frame], ancillary)
    if sent < len(frame):
        conn.sendall(frame[sent:])


def receive(conn: _socket.socket) -> list[bytes] | None:
    return receive_with_fds(conn, fds=False)[0]


_UCRED = struct.Struct("3i")


def receive_with_fds(conn: _socket.socket, *, fds: bool = True, seconds: float | None = None
                      ) -> tuple[list[bytes] | None, list[int], tuple[int, int] | None]:
    """One frame's fields (None when the other end closed first), the descriptors that came with
    its first bytes (close-on-exec), and who sent them (pid, uid; with ``SO_PASSCRED`` on). Reads
    exactly one frame, within ``seconds`` in all when given: the next frame stays for the next call."""
    import time

    deadline = None if seconds is None else time.monotonic() + seconds
    received: list[int] = []
    sender = None
    try:
        room = _socket.CMSG_SPACE(3 * struct.calcsize("i")) + _socket.CMSG_SPACE(_UCRED.size) if fds else 0
        _budget(conn, deadline)
        head, ancillary, _flags, _addr = conn.recvmsg(_LENGTH.size, room, _socket.MSG_CMSG_CLOEXEC)
        for level, kind, data in ancillary:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                whole = len(data) - len(data) % 4
                received += struct.unpack(f"{whole // 4}i", data[:whole])
            elif level == _socket.SOL_SOCKET and kind == _socket.SCM_CREDENTIALS and len(data) >= _UCRED.size:
                pid, uid, _gid = _UCRED.unpack_from(data)
                sender = (pid, uid)
        if not head:
            raise EOFError
        head += _exactly(conn, _LENGTH.size - len(head), deadline)
        (length,) = _LENGTH.unpack(head)
        if length > _MAX_FRAME:
            raise ValueError("a warm-process frame too long")
        return _fields(_exactly(conn, length, deadline)), received, sender
    except EOFError:
        close_all(received)
        return None, [], None
    except (ValueError, struct.error):
        close_all(received)
        raise ValueError("a malformed warm-process frame") from None
    except BaseException:  # a timeout, an interrupt: the descriptors received go with it
        close_all(received)
        raise


def _budget(conn: _socket.socket, deadline: float | None) -> None:
    """Give the next read what is left of ``deadline`` (a timeout, an OSError, once it has passed)."""
    if deadline is not None:
        import time

        conn.settimeout(max(0.0001, deadline - time.monotonic()))


def _fields(payload: bytes) -> list[bytes]:
    fields, at = [], 0
    while at < len(payload):
        (n,) = _LENGTH.unpack_from(payload, at)
        at += _LENGTH.size
        if at + n > len(payload):
            raise ValueError("a field runs past its frame")
        fields.append(payload[at:at + n])
        at += n
    return fields


def close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        os.close(fd)


def _exactly(conn: _socket.socket, n: int, deadline: float | None = None) -> bytes:
    chunks = []
    while n > 0:
        _budget(conn, deadline)
        chunk = conn.recv(min(n, 65536))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def numbers(values: Iterable[int]) -> bytes:
    return b",".join(b"%d" % v for v in values)


def parse_numbers(field: bytes) -> list[int]:
    return [int(v) for v in field.split(b",") if v]
