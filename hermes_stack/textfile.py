"""Bytes of a user's text file -> str, or one Problem naming the line: a UTF-8 byte-order mark, or a byte that is not
UTF-8. Shared by the config loader and the key file, so both say the same thing with the line number."""

from __future__ import annotations

from hermes_stack.errors import Problem

BOM = b"\xef\xbb\xbf"


def decode_text(name: str, data: bytes) -> tuple[str | None, Problem | None]:
    if data.startswith(BOM):
        # tomllib says "invalid statement at 1:1", json "Unexpected UTF-8 BOM", dotenv reads a name with a BOM in it.
        return None, Problem(f"{name}:1", "(file)", "a UTF-8 byte-order mark (BOM) at the start",
                             "UTF-8 without a BOM", 'save the file as "UTF-8", not "UTF-8 with BOM"')
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return None, Problem(f"{name}:{line}", "(file)", f"a byte that is not UTF-8 (0x{data[exc.start]:02x})",
                             "UTF-8 text", "retype that line, or save the file as UTF-8")
