"""Local input without end: files the user names that are devices, FIFOs or huge, and archives
that inflate far past what they declare.

``import /dev/zero`` read forever, ``retread add --from-file`` on a FIFO waited forever, and a
1.5 GB member in a 1.5 MB wheel was inflated into memory. Each is refused now, before a byte of
it is read or inflated, with its message and exit code, and nothing changes on disk.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import tarfile
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import pytest
from test_artifacts import assert_nothing_imported, sdist_with, serve, wheel_with

from conftest import Demo
from helpers import snapshot
from patchtool.inputs import MAX_INPUT_BYTES
from patchtool.upstream.members import MAX_RATIO

BOMB = 64 << 20  # inflates to 64 MiB from some 64 KiB: a bomb by its ratio, small enough to build in a test


def run(demo: Demo, *args: str) -> tuple[int, dict[str, Any]]:
    res = demo.run(*args, "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)


def hostile_file(tmp_path: Path, kind: str) -> Path:
    if kind == "device":
        return Path("/dev/zero")
    if kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
        return path
    path = tmp_path / "huge"
    with open(path, "wb") as fh:  # sparse: its size is what counts, nothing is written
        fh.truncate(MAX_INPUT_BYTES + 1)
    return path


def why(path: Path, what: str, kind: str) -> str:
    if kind == "huge":
        return f"{path}: {what} is {MAX_INPUT_BYTES + 1} bytes, more than the {MAX_INPUT_BYTES} patchtool reads"
    named = {"device": "a device", "fifo": "a named pipe (FIFO)"}[kind]
    return f"{path}: {what} is {named}, not a regular file; refusing to read it"


@pytest.mark.parametrize("kind", ["device", "fifo", "huge"])
def test_import_reads_only_a_regular_file_of_bounded_size(one_patch: Demo, tmp_path: Path, kind: str) -> None:
    source = hostile_file(tmp_path, kind)
    before = snapshot(one_patch.root)
    code, out = run(one_patch, "import", str(source), "--subject", "s", "--author", "A <a@example.org>")
    assert code == 2, out
    assert out["errors"][0]["message"] == why(source, "the patch", kind)
    assert snapshot(one_patch.root) == before


@pytest.mark.parametrize("kind", ["device", "fifo", "huge"])
def test_retread_add_from_file_reads_only_a_regular_file(one_patch: Demo, tmp_path: Path, kind: str) -> None:
    source = hostile_file(tmp_path, kind)
    before = snapshot(one_patch.root)
    code, out = run(one_patch, "retread", "add", "--from-file", str(source))
    assert code == 2, out
    assert out["errors"][0]["message"] == why(source, "the --from-file entry", kind)
    assert snapshot(one_patch.root) == before


def test_quilt_series_that_is_a_fifo_is_refused(one_patch: Demo, tmp_path: Path) -> None:
    quilt = tmp_path / "quilt"
    quilt.mkdir()
    os.mkfifo(quilt / "series")
    before = snapshot(one_patch.root)
    code, out = run(one_patch, "import", str(quilt))
    assert code == 1, out
    assert out["errors"][0]["message"] == "is a named pipe (FIFO), not a regular file"
    assert snapshot(one_patch.root) == before


def test_wheel_bomb_is_refused_before_it_is_inflated(demo: Demo) -> None:
    wheel = wheel_with(demo.root.parent / "bomb" / "demo-1.0-py3-none-any.whl", {"demo/zeros.bin": bytes(BOMB)})
    serve(demo, wheel)
    demo.write_manifest()
    code, out = run(demo, "status")
    assert code == 4, out
    message = out["errors"][0]["message"]
    assert message.startswith(f"demo-1.0-py3-none-any.whl: entry 'demo/zeros.bin' declares {BOMB} bytes from ")
    assert message.endswith(f"compressed, more than {MAX_RATIO} times as many (a zip bomb?); refusing it")
    assert_nothing_imported(demo)


def test_sdist_bomb_is_refused_before_it_is_inflated(demo: Demo) -> None:
    sdist = sdist_with(demo.root.parent / "bomb" / "demo-1.0.tar.gz", {"demo-1.0/demo/zeros.bin": bytes(BOMB)})
    serve(demo, sdist, prefix=("demo-1.0/demo/", "python/demo/"))
    demo.write_manifest()
    code, out = run(demo, "status")
    assert code == 4, out
    message = out["errors"][0]["message"]
    assert message.startswith("demo-1.0.tar.gz: entry 'demo-1.0/demo/zeros.bin' brings the archive to ")
    assert message.endswith(f"more than {MAX_RATIO} times as many (a tar bomb?); refusing it")
    assert_nothing_imported(demo)


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_an_archive_of_too_many_members_is_refused(demo: Demo, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Found by an attack: a 3 MB sdist of 500,000 empty members took 81 s and 366 MB, and the
    4 GiB download cap allows billions. An archive lists at most 100,000 members (lowered here to
    what the demo release has, so the case stays small)."""
    from patchtool.upstream import members

    extra = {"demo/one.py": b"", "demo/two.py": b""}
    if kind == "wheel":
        artifact = wheel_with(demo.root.parent / "many" / "demo-1.0-py3-none-any.whl", extra)
        serve(demo, artifact)
        with zipfile.ZipFile(artifact) as zf:
            listed = len(zf.infolist())
    else:
        artifact = sdist_with(
            demo.root.parent / "many" / "demo-1.0.tar.gz", {f"demo-1.0/{k}": v for k, v in extra.items()}
        )
        serve(demo, artifact, prefix=("demo-1.0/demo/", "python/demo/"))
        with tarfile.open(artifact) as tf:
            listed = len(tf.getmembers())
    demo.write_manifest()
    monkeypatch.setattr(members, "MAX_MEMBERS", listed - 1)
    code, out = run(demo, "status")
    assert code == 4, out
    assert out["errors"][0]["message"] == (
        f"{artifact.name}: it has more than the {listed - 1} members patchtool unpacks; refusing it"
    )
    assert_nothing_imported(demo)
    monkeypatch.setattr(members, "MAX_MEMBERS", listed)
    code, out = run(demo, "status")
    assert code == 0, out


def test_an_sdist_declaring_more_than_the_total_is_refused(demo: Demo, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by an attack: an sdist had no total, only 200 times its own size, so incompressible
    padding at its end bought room for 9.4 GiB of zeros before it (exit 70, MemoryError). The
    documented 8 GiB total holds for an sdist too, checked over every header before any member is
    read (lowered here, with incompressible members, so the case stays small)."""
    from patchtool.upstream import members

    noise = {f"demo-1.0/demo/noise{n}.bin": os.urandom(40_000) for n in range(3)}
    sdist = sdist_with(demo.root.parent / "big" / "demo-1.0.tar.gz", noise)
    serve(demo, sdist, prefix=("demo-1.0/demo/", "python/demo/"))
    demo.write_manifest()
    with tarfile.open(sdist) as tf:
        sizes = [ti.size for ti in tf.getmembers()]
    monkeypatch.setattr(members, "MAX_UNPACKED_BYTES", sum(sizes) - 1)
    code, out = run(demo, "status")
    assert code == 4, out
    assert out["errors"][0]["message"] == (
        f"demo-1.0.tar.gz: entry 'demo-1.0/demo/noise2.bin' brings the archive to {sum(sizes)} bytes, more than "
        f"the {sum(sizes) - 1} patchtool unpacks; refusing it"
    )
    assert_nothing_imported(demo)
    monkeypatch.setattr(members, "MAX_UNPACKED_BYTES", sum(sizes))
    code, out = run(demo, "status")
    assert code == 0, out


def test_sdist_member_over_the_cap_is_refused_by_its_header(demo: Demo) -> None:
    """A tar header that declares more than a member may have is refused before its data is read."""
    from patchtool.upstream.members import MAX_MEMBER_BYTES

    path = demo.root.parent / "big" / "demo-1.0.tar.gz"
    path.parent.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        ti = tarfile.TarInfo("demo-1.0/demo/huge.bin")
        ti.size = MAX_MEMBER_BYTES + 1
        tf.addfile(ti)  # the header alone: the data the size promises never follows
    import gzip

    path.write_bytes(gzip.compress(buf.getvalue()))
    serve(demo, path, prefix=("demo-1.0/demo/", "python/demo/"))
    demo.write_manifest()
    code, out = run(demo, "status")
    assert code == 4, out
    assert out["errors"][0]["message"] == (
        f"demo-1.0.tar.gz: entry 'demo-1.0/demo/huge.bin' declares "
        f"{MAX_MEMBER_BYTES + 1} bytes, more than the {MAX_MEMBER_BYTES} a "
        "member may have; refusing it"
    )
    assert_nothing_imported(demo)


@pytest.mark.parametrize("kind", ["gnu-longname", "pax"])
def test_an_sdist_header_that_would_read_megabytes_is_refused_at_the_header(demo: Demo, kind: str) -> None:
    """Found by an attack: tarfile reads a GNU long name's (or a PAX header's) data whole while it
    iterates, before any member is handed back to be checked: a 400 MiB "name" in a 400 KiB sdist
    took 4 GiB of memory. The header's read is refused at the header."""
    from patchtool.upstream.artifacts import HEADER_LIMIT

    size = 8 << 20
    header = tarfile.TarInfo("././@LongLink" if kind == "gnu-longname" else "demo-1.0/PaxHeaders/x")
    header.type, header.size = (tarfile.GNUTYPE_LONGNAME if kind == "gnu-longname" else tarfile.XHDTYPE), size
    raw = header.tobuf(format=tarfile.GNU_FORMAT) + b"a" * size + bytes(-size % 512) + bytes(1024)
    import gzip

    path = demo.root.parent / "longname" / "demo-1.0.tar.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(raw))
    serve(demo, path, prefix=("demo-1.0/demo/", "python/demo/"))
    demo.write_manifest()
    code, out = run(demo, "status")
    assert code == 4, out
    assert out["errors"][0]["message"] == (
        f"demo-1.0.tar.gz: a tar header asks to read {size} bytes at offset 512, "
        f"more than the {HEADER_LIMIT} a header may hold (a hostile long name or "
        "PAX header?); refusing it"
    )
    assert_nothing_imported(demo)


PLAIN = "--- a/python/demo/core.py\n+++ b/python/demo/core.py\n@@ -1 +1 @@\n-x\n+y\n"


@pytest.mark.parametrize(
    ("series", "files", "message"),
    [
        # found by an attack: an entry a series lists was read whole, past the bound a named file has
        (
            "huge.patch\n",
            {"huge.patch": None},
            f"is {MAX_INPUT_BYTES + 1} bytes, more than the {MAX_INPUT_BYTES} patchtool reads",
        ),
        (
            "latin1.patch\n",
            {"latin1.patch": b"Description: caf\xe9\n" + PLAIN.encode()},
            "{quilt}/series:1: latin1.patch is not UTF-8 (invalid continuation byte at byte 16)",
        ),
        (
            "x.patch -p" + "9" * 5000 + "\n",
            {"x.patch": PLAIN.encode()},
            "{quilt}/series:1: x.patch: option '-p" + "9" * 18 + "'... is not supported",
        ),
        (
            "x.patch\n",
            {"x.patch": PLAIN.replace("@@ -1 +1 @@", "@@ -1," + "9" * 5000 + " +1 @@").encode()},
            "corrupt patch at line 3: '@@ -1," + "9" * 54 + "' is no hunk header",
        ),
    ],
)
def test_a_series_entry_is_read_bounded_and_refused_as_a_message(
    one_patch: Demo, tmp_path: Path, series: str, files: dict[str, bytes | None], message: str
) -> None:
    quilt = tmp_path / "quilt"
    quilt.mkdir()
    (quilt / "series").write_text(series)
    for name, data in files.items():
        if data is None:
            with open(quilt / name, "wb") as fh:  # sparse: its size is what counts
                fh.truncate(MAX_INPUT_BYTES + 1)
        else:
            (quilt / name).write_bytes(data)
    before = snapshot(one_patch.root)
    code, out = run(one_patch, "import", "--series", str(quilt / "series"))
    assert code in (1, 2), out
    error = out["errors"][0]
    assert error["message"].replace(str(quilt), "{quilt}") == message
    assert error.get("file") in ("huge.patch", None, str(quilt / "x.patch"), str(quilt / "latin1.patch")), error
    assert snapshot(one_patch.root) == before


def test_provenance_of_a_bomb_wheel_is_refused_before_it_is_inflated(demo: Demo, tmp_path: Path) -> None:
    # found by an attack: `provenance` of a 1 MB wheel inflated its members whole and took 2.1 GB
    record = "demo-1.0.dist-info/patchtool-provenance.json"
    wheel = wheel_with(tmp_path / "bomb" / "demo-1.0-py3-none-any.whl", {record: b" " * BOMB})
    before = snapshot(demo.root, wheel.parent)
    code, out = run(demo, "provenance", str(wheel))
    assert code == 1, out
    [error] = out["errors"]
    assert error["message"].startswith(f"demo-1.0-py3-none-any.whl: entry {record!r} declares {BOMB} bytes from ")
    assert error["message"].endswith(f"compressed, more than {MAX_RATIO} times as many (a zip bomb?); refusing it")
    assert error["hint"] == "the wheel file is damaged or hostile; build it again"
    assert snapshot(demo.root, wheel.parent) == before


def with_zip64_end(wheel: Path, *, members: int | None = None, directory: int | None = None) -> None:
    """Give ``wheel`` a zip64 end record (and its locator) before its end record, declaring
    ``members`` members and a central directory of ``directory`` bytes (else the true ones)."""
    import struct

    data = wheel.read_bytes()
    at = data.rindex(b"PK\x05\x06")
    _, _, _, _, count, size, offset, _ = struct.unpack("<4s4H2LH", data[at : at + 22])
    record = struct.pack(
        "<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, members or count, directory or size, offset
    )
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, at, 1)
    wheel.write_bytes(data[:at] + record + locator + data[at:])


@pytest.mark.parametrize("lie", ["members", "directory"])
def test_a_wheel_whose_end_record_declares_too_much_is_refused_before_its_directory_is_read(
    demo: Demo, lie: str
) -> None:
    """Found by a review: zipfile reads the whole central directory and builds every member before
    anyone could count them. The zip64 end record's count, and its directory's size, are read
    first: a wheel declaring 2**40 members (which zipfile, reading the directory alone, took for a
    good one of 5) or a directory of 1 TiB (which it called a bad offset) is refused as too much."""
    wheel = wheel_with(demo.root.parent / "lie" / "demo-1.0-py3-none-any.whl", {})
    with_zip64_end(wheel, **{lie: 1 << 40})
    serve(demo, wheel)
    demo.write_manifest()
    before = snapshot(demo.root)
    code, out = run(demo, "status")
    assert code == 4, out
    assert (
        out["errors"][0]["message"]
        == {
            "members": f"{wheel.name}: it has more than the 100000 members patchtool unpacks; refusing it",
            "directory": (
                f"{wheel.name}: its central directory declares {1 << 40} bytes, more than the 67108864 patchtool reads; "
                "refusing it"
            ),
        }[lie]
    )
    assert snapshot(demo.root) == before
    assert_nothing_imported(demo)


def test_a_wheel_listing_too_many_members_is_refused_before_zipfile_reads_them(
    demo: Demo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count its end record declares is not what zipfile reads: it reads the directory's
    headers, however many. They are counted first, one header at a time, and the archive refused
    at the first over the limit: here the member after it is damaged, which zipfile, reading
    every header, called the whole wheel damaged (lowered to what the demo release has)."""
    from patchtool.upstream import members

    wheel = wheel_with(demo.root.parent / "many" / "demo-1.0-py3-none-any.whl", {"demo/one.py": b""})
    with zipfile.ZipFile(wheel) as zf:
        listed = len(zf.infolist())
    data = bytearray(wheel.read_bytes())
    last = data.rindex(b"PK\x01\x02")
    data[last : last + 4] = b"PK\x01\x00"  # the last header damaged
    end = data.rindex(b"PK\x05\x06")
    data[end + 8 : end + 12] = b"\x01\x00\x01\x00"  # one member declared, on this disk and in all
    wheel.write_bytes(bytes(data))
    serve(demo, wheel)
    demo.write_manifest()
    monkeypatch.setattr(members, "MAX_MEMBERS", listed - 2)
    before = snapshot(demo.root)
    code, out = run(demo, "status")
    assert code == 4, out
    assert out["errors"][0]["message"] == (
        f"{wheel.name}: it has more than the {listed - 2} members patchtool unpacks; refusing it"
    )
    assert snapshot(demo.root) == before
    assert_nothing_imported(demo)


@pytest.mark.parametrize("shape", ["one-member", "many-members"])
def test_an_sdist_that_inflates_far_past_its_compressed_bytes_is_refused_as_it_inflates(demo: Demo, shape: str) -> None:
    """Found by a review: an sdist's headers declare all its data, and the whole was held only to
    200 times the file's size, so incompressible padding at its end bought inflating zeros before
    it (under the 8 GiB total, some 30 s and that much memory). The stream is measured as it
    inflates: a member's data (``one-member``: 64 MiB of zeros), or the archive so far
    (``many-members``: 15 MiB each, under the floor a member is held to), inflating past 16 MiB at
    more than 200 times the compressed bytes it took is refused there."""
    zeros = {"one-member": {"demo-1.0/demo/zeros.bin": bytes(BOMB)}}.get(
        shape, {f"demo-1.0/demo/zeros{n}.bin": bytes(15 << 20) for n in range(5)}
    )
    padding = {"demo-1.0/padding.bin": os.urandom(400_000)}
    # one member after the padding, which keeps the archive so far under the ratio; many before it
    members = {**padding, **zeros} if shape == "one-member" else {**zeros, **padding}
    sdist = sdist_with(demo.root.parent / "bomb" / "demo-1.0.tar.gz", members)
    with tarfile.open(sdist) as tf:  # the declared bounds hold: only inflating shows it
        assert sum(ti.size for ti in tf.getmembers()) < MAX_RATIO * sdist.stat().st_size
    serve(demo, sdist, prefix=("demo-1.0/demo/", "python/demo/"))
    demo.write_manifest()
    before = snapshot(demo.root)
    code, out = run(demo, "status")
    assert code == 4, out
    message = out["errors"][0]["message"]
    first = min(zeros)
    assert message.startswith(
        f"demo-1.0.tar.gz: entry {first!r} inflates to "
        if shape == "one-member"
        else "demo-1.0.tar.gz: entry 'demo-1.0/demo/zeros1.bin' brings the archive to "
    ), message
    assert message.endswith(f"more than {MAX_RATIO} times as many (a tar bomb?); refusing it"), message
    assert snapshot(demo.root) == before
    assert_nothing_imported(demo)


def test_a_wheel_whose_members_together_declare_past_the_ratio_is_refused(demo: Demo) -> None:
    """Found by an attack: a wheel had no ratio for the whole, only for each member, so 100 members
    of 16 MiB of zeros (each at the floor a member is held to) in a 1.7 MB wheel cost 1.7 GB. The
    members' declared sizes together are held to 200 times the wheel's own size, as an sdist is,
    before any is inflated (five of 15 MiB here)."""
    zeros = {f"demo/zeros{n}.bin": bytes(15 << 20) for n in range(5)}
    wheel = wheel_with(demo.root.parent / "bomb" / "demo-1.0-py3-none-any.whl", zeros)
    with zipfile.ZipFile(wheel) as zf:
        total = sum(info.file_size for info in zf.infolist())
    serve(demo, wheel)
    demo.write_manifest()
    before = snapshot(demo.root)
    code, out = run(demo, "status")
    assert code == 4, out
    assert out["errors"][0]["message"] == (
        f"demo-1.0-py3-none-any.whl: its members declare {total} bytes in all from {wheel.stat().st_size} "
        f"compressed, more than {MAX_RATIO} times as many (a zip bomb?); refusing it"
    )
    assert out["errors"][0]["hint"] == "the artifact is malformed or hostile; nothing was imported"
    assert snapshot(demo.root) == before
    assert_nothing_imported(demo)


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_an_import_holds_one_member_at_a_time(one_patch: Demo, tmp_path: Path, kind: str) -> None:
    """Found by an attack: an import read every member of the artifact into memory before git was
    handed any (1.7 GB for the wheel above, and up to the 8 GiB total for one within every
    bound). The import's files are listed and checked first, none read; each one's content is
    read as git's stream reaches it and dropped before the next: importing 30 members of 512 KiB
    (15 MiB, within every bound) never holds 4 MiB (Python's own count, ``tracemalloc``)."""
    from patchtool.git.stream import FIXED_IDENT, Ident, NewCommit, commit_stream
    from patchtool.names import ArtifactFilename, PrefixTemplate
    from patchtool.project.repository import Project
    from patchtool.upstream.artifacts import import_files

    parts = {f"demo/part{n}.bin": bytes(512 << 10) for n in range(30)}
    art = Project.load(one_patch.root).pin().artifact
    assert art is not None
    if kind == "sdist":
        path = sdist_with(tmp_path / "demo-1.0.tar.gz", {f"demo-1.0/{k}": v for k, v in parts.items()})
        art = dataclasses.replace(
            art, filename=ArtifactFilename(path.name), prefix_from_template=PrefixTemplate("demo-1.0/demo/")
        )
    else:
        path = wheel_with(tmp_path / art.filename, parts)
    ident = Ident(*FIXED_IDENT)
    streamed = 0
    tracemalloc.start()
    try:
        with import_files(path, art) as files:
            assert all(f.data is None and f.read is not None for f in files)  # none read yet
            commit = NewCommit(message="m", author=ident, committer=ident, files=tuple(files))
            for chunk in commit_stream(None, [commit], "refs/x"):  # as fast-import takes it
                streamed += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert streamed > 15 << 20
    assert peak < 4 << 20, peak


def sdist_then(demo: Demo, blocks: bytes, *, end: bool = True) -> Path:
    """The demo release as an sdist with raw tar ``blocks`` after its members, then (``end``) the
    blocks that end an archive, served and pinned."""
    import gzip

    good = sdist_with(demo.root.parent / "plain" / "demo-1.0.tar.gz", {})
    with tarfile.open(good) as tf:
        tf.getmembers()  # then its offset is where the blocks that end it start
    path = demo.root.parent / "hostile" / "demo-1.0.tar.gz"
    path.parent.mkdir(exist_ok=True)
    tar = gzip.decompress(good.read_bytes())[: tf.offset]
    path.write_bytes(gzip.compress(tar + blocks + bytes(1024 if end else 0)))
    serve(demo, path, prefix=("demo-1.0/demo/", "python/demo/"))
    demo.write_manifest()
    return path


def gnu_header(name: str, kind: bytes, size: int = 0, *, fill: dict[int, bytes] | None = None) -> bytes:
    """One GNU tar header block of type ``kind``, with raw bytes ``fill`` at their offsets."""
    ti = tarfile.TarInfo(name)
    ti.size = size
    block = bytearray(ti.tobuf(tarfile.GNU_FORMAT))
    block[156:157] = kind
    for at, raw in (fill or {}).items():
        block[at : at + len(raw)] = raw
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def pax_header(records: dict[str, str], kind: bytes = tarfile.XHDTYPE) -> bytes:
    """A PAX header block (``x``, or ``g`` for a global one) with its records, padded."""
    data = b""
    for key, value in records.items():
        record = f" {key}={value}\n".encode()
        length = len(record) + 1
        while len(str(length)) + len(record) != length:  # the length counts its own digits
            length += 1
        data += str(length).encode() + record
    return gnu_header("././@PaxHeader", kind, len(data)) + data + bytes(-len(data) % 512)


def refused_as_hostile(demo: Demo, message: str) -> None:
    before = snapshot(demo.root)
    code, out = run(demo, "status")
    assert code == 4, out
    assert out["errors"][0]["message"] == message
    assert out["errors"][0]["hint"] == "the artifact is malformed or hostile; nothing was imported"
    assert snapshot(demo.root) == before
    assert_nothing_imported(demo)


def test_an_old_gnu_sparse_member_is_refused_at_its_header(demo: Demo) -> None:
    """Found by an attack: a GNU sparse member (type ``S``) chains extension blocks, and tarfile
    loops over every one as it lists the members, before any is handed back to be checked: 200,000
    of them in a 350 KB sdist took 1.1 GB, and it was imported as clean. An sdist never holds a
    sparse file: it is refused at its header, before tarfile reads on. Here the header says an
    extension block follows and the archive ends there, which tarfile, reading on, took for an
    internal error."""
    extended = {482: b"\x01", 483: b"%011o\0" % 100}  # isextended, then the real size
    sdist_then(demo, gnu_header("demo-1.0/demo/sparse.py", tarfile.GNUTYPE_SPARSE, fill=extended), end=False)
    refused_as_hostile(
        demo,
        "demo-1.0.tar.gz: entry 'demo-1.0/demo/sparse.py' is a sparse file (GNU type 'S'), which an sdist never "
        "holds; refusing it",
    )


@pytest.mark.parametrize(
    ("records", "kind"),
    [
        ({"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "demo-1.0/demo/s.py"}, b"x"),
        ({"GNU.sparse.map": "0,10", "GNU.sparse.numblocks": "1"}, b"x"),
        ({"GNU.sparse.size": "10", "GNU.sparse.offset": "0", "GNU.sparse.numbytes": "10"}, b"x"),
        ({"comment": "GNU.sparse.map=1", "GNU.sparse.realsize": "10"}, tarfile.XGLTYPE),
    ],
    ids=["1.0", "0.1", "0.0", "global"],
)
def test_a_pax_sparse_member_is_refused_at_its_header(demo: Demo, records: dict[str, str], kind: bytes) -> None:
    """Found by an attack: a PAX header's ``GNU.sparse.*`` records make the next member a sparse
    file, whose map (format 1.0) tarfile reads from the member's data as it lists the members:
    millions of numbers in an 86 KB sdist took a gigabyte, and a map that ends early ended in an
    internal error. The header is refused as its records are read, whatever the format, global
    headers too. Here the map declares numbers that never follow."""
    member = gnu_header("demo-1.0/GNUSparseFile.0/s.py", tarfile.REGTYPE, 512)
    sdist_then(demo, pax_header(records, kind) + member + b"99999\n1000000000\n".ljust(512, b"\0"))
    keyword = next(k for k in records if k.startswith("GNU.sparse."))
    refused_as_hostile(
        demo,
        f"demo-1.0.tar.gz: entry '././@PaxHeader' is a PAX header that makes a sparse file ({keyword!r}), which "
        "an sdist never holds; refusing it",
    )


@pytest.mark.parametrize("how", ["pax", "base-256"])
def test_a_member_of_negative_size_is_refused(demo: Demo, how: str) -> None:
    """Found by a second attack: a PAX ``size`` record of -1024, or a size field of -256 in tar's
    base-256 form, was imported as an empty file while tarfile stepped back in the archive by it
    (members hidden or read twice)."""
    name = "demo-1.0/demo/negative.py"
    if how == "pax":
        blocks, size = pax_header({"size": "-1024"}) + gnu_header(name, tarfile.REGTYPE), -1024
    else:
        blocks, size = gnu_header(name, tarfile.REGTYPE, fill={124: tarfile.itn(-256, 12, tarfile.GNU_FORMAT)}), -256
    sdist_then(demo, blocks)
    refused_as_hostile(
        demo,
        f"demo-1.0.tar.gz: entry {name!r} declares a negative size ({size}), which is no size; refusing it",
    )


@pytest.mark.parametrize("kind", ["pax", "gnu-longname"])
def test_a_chain_of_extended_headers_is_refused_past_its_bound(demo: Demo, kind: str) -> None:
    """Found by an attack: tarfile reads a member's extended headers (PAX headers, GNU long names)
    by recursion, one call per header, so 5,000 in a row ended in an internal error
    (RecursionError). A member may have 8 (a global PAX header, its own, a long name and a long
    link are the most a well-made archive gives one): the 9th in a row is refused at its header,
    and 8 are read as the member they describe."""
    from patchtool.upstream.artifacts import MAX_EXTENDED_HEADERS

    name = b"demo-1.0/demo/long.py\0"
    header = (
        pax_header({"comment": "x"})
        if kind == "pax"
        else gnu_header("././@LongLink", tarfile.GNUTYPE_LONGNAME, len(name)) + name.ljust(512, b"\0")
    )
    member = gnu_header("demo-1.0/demo/f.py", tarfile.REGTYPE)
    sdist_then(demo, header * (MAX_EXTENDED_HEADERS + 1) + member)
    refused_as_hostile(
        demo,
        f"demo-1.0.tar.gz: entry '././@{'PaxHeader' if kind == 'pax' else 'LongLink'}' is extended header "
        f"{MAX_EXTENDED_HEADERS + 1} in a row, more than the {MAX_EXTENDED_HEADERS} a member may have (a hostile "
        "chain of long names or PAX headers?); refusing it",
    )
    sdist_then(demo, header * MAX_EXTENDED_HEADERS + member)
    code, out = run(demo, "status")
    assert code == 0, out


@pytest.mark.parametrize("kind", ["pax-length", "recursion"])
def test_what_tarfile_raises_on_a_malformed_header_is_a_refusal(
    demo: Demo, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Found by an attack: what tarfile raises on a header it parses without checking it ended in
    an internal error (exit 70), not the refusal of a malformed artifact: a PAX record whose
    length has 5,000 digits (ValueError), and, with the chain's bound lifted here to reach it,
    5,000 extended headers in a row (RecursionError)."""
    from patchtool.upstream import artifacts

    member = gnu_header("demo-1.0/demo/f.py", tarfile.REGTYPE)
    if kind == "pax-length":
        records = b"9" * 5000 + b" comment=x\n"
        blocks = gnu_header("././@PaxHeader", tarfile.XHDTYPE, len(records)) + records.ljust(5120, b"\0") + member
        why = "malformed: ValueError: Exceeds the limit (4300 digits) for integer string conversion"
    else:
        monkeypatch.setattr(artifacts, "MAX_EXTENDED_HEADERS", 100_000)
        blocks = pax_header({"comment": "x"}) * 5000 + member
        why = "malformed: its headers nest too deep"
    sdist_then(demo, blocks)
    before = snapshot(demo.root)
    code, out = run(demo, "status")
    assert code == 4, out
    message = out["errors"][0]["message"]
    assert message.startswith(f"demo-1.0.tar.gz is damaged and cannot be read ({why}") and message.endswith(
        "); refusing it"
    ), message
    assert snapshot(demo.root) == before
    assert_nothing_imported(demo)


@pytest.mark.parametrize(
    ("file", "command"),
    [("patchset.toml", "check"), ("upstream-pins/demo-1.0.toml", "check"), ("retread.toml", "retread")],
)
def test_a_toml_file_too_large_to_parse_in_bounded_time_is_refused(one_patch: Demo, file: str, command: str) -> None:
    """Found by an attack: a manifest of 64 MiB (the read bound) kept the TOML parsers busy for
    minutes, since they are slow on many small values. A manifest, a pin and the registry are
    bounded at 4 MiB, refused before they are parsed, naming the file; nothing changes."""
    from patchtool.project.fields import MAX_TOML_BYTES

    if file == "retread.toml":
        manifest = one_patch.root / "patchset.toml"
        manifest.write_text(manifest.read_text().replace("schema = 1\n", 'schema = 1\nregistry = "retread.toml"\n', 1))
    path = one_patch.root / file
    text = path.read_text() if path.exists() else ""
    path.write_text(text + "\nbig = [" + "1," * ((MAX_TOML_BYTES - len(text)) // 2) + "]\n")
    size = len(path.read_bytes())
    assert size > MAX_TOML_BYTES
    before = snapshot(one_patch.root)
    code, data = run(one_patch, *([command, "list"] if command == "retread" else [command]))
    assert snapshot(one_patch.root) == before
    assert code == 1
    assert [(e["file"], e["message"]) for e in data["errors"]] == [
        (file, f"is {size} bytes, more than the {MAX_TOML_BYTES} patchtool reads in a TOML file")
    ]


def test_a_toml_file_as_large_as_the_bound_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound counts the file's bytes (lowered here, so that the case stays small), for the
    reader that checks a file and for the one that edits the manifest."""
    from patchtool.errors import InvalidInput
    from patchtool.project import fields, tomlio

    text = 'name = "é"\n'  # 12 bytes, 11 characters
    monkeypatch.setattr(fields, "MAX_TOML_BYTES", 12)
    assert fields.load_toml(text, file="x.toml") == {"name": "é"}
    assert tomlio.parse(text, file="x.toml")["name"] == "é"
    for read in (fields.load_toml, tomlio.parse):
        with pytest.raises(InvalidInput) as exc:
            read(text + " ", file="x.toml")
        assert exc.value.message == "x.toml is 13 bytes, more than the 12 patchtool reads in a TOML file"


@pytest.mark.parametrize("kind", ["huge", "link"])
def test_export_reads_no_patch_file_past_the_bound_nor_through_a_link(
    one_patch: Demo, tmp_path: Path, kind: str
) -> None:
    """Found by the second attack: export compared each patch file with its checkout's record by
    reading it whole, past the 64 MiB bound and through a link (a 600 MB file: 661 MB held). It
    reads through the one bounded reader now: such a file is refused as the series' loader refuses
    it, naming it, and never read (``tracemalloc``: Python's own count)."""
    from patchtool.project.repository import Project

    assert one_patch.run("checkout").returncode == 0
    patch = one_patch.root / Project.load(one_patch.root).manifest.patches[0].file
    big = tmp_path / "big" if kind == "link" else patch
    patch.unlink()
    with open(big, "wb") as fh:  # sparse: its size is what counts
        fh.truncate(MAX_INPUT_BYTES * 3)
    if kind == "link":
        patch.symlink_to(big)
    tracemalloc.start()
    try:
        res = one_patch.run("export", "--json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res.returncode == 1, res.stdout + res.stderr
    [error] = json.loads(res.stdout)["errors"]
    assert error["file"] == "patches/0001-greet.patch"
    assert error["message"].endswith(
        f"is {MAX_INPUT_BYTES * 3} bytes, more than the {MAX_INPUT_BYTES} patchtool reads"
        if kind == "huge"
        else "is a symbolic link (it could lead outside the repository; patchtool follows none)"
    ), error
    assert peak < MAX_INPUT_BYTES // 4, peak
